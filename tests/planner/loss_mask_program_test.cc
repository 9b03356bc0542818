// A loss mask in the planner (Plan::trained_fraction): the head computes the
// logits of the trained targets' rows only, so its GEMMs and its softmax
// shrink with the share trained and nothing else does; the plan file keeps
// the share and refuses one outside (0, 1].
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "planner/memory_model.h"
#include "planner/memory_timeline.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/step_program.h"
#include "planner/work_model.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

Plan OneGpu(const std::string& model, int64_t seq_len, int64_t micro_batch, double trained) {
  Plan p;
  p.model = PresetModel(model);
  p.profile = "h200-sxm-1gpu";
  p.gpus = 1;
  p.gpus_per_node = 1;
  p.strategy = ShardingStrategy::kNoShard;
  p.seq_len = seq_len;
  p.micro_batch = micro_batch;
  p.trained_fraction = trained;
  NormaliseGrouping(p);
  p.Validate();
  return p;
}

TEST(LossMaskProgramTest, TheHeadsLossShrinksWithTheShareTrainedAndItsNormDoesNot) {
  const Plan all = OneGpu("llama3.2-1b", 4096, 4, 1.0), half = OneGpu("llama3.2-1b", 4096, 4, 0.5);
  for (const bool cpu : {false, true}) {
    SCOPED_TRACE(cpu ? "cpu" : "gpu");
    const ActivationShape a = ShapeOfPlan(all, cpu), b = ShapeOfPlan(half, cpu);
    EXPECT_DOUBLE_EQ(b.trained_fraction, 0.5);
    const OpWork fa = HeadForwardWork(a), fb = HeadForwardWork(b);
    EXPECT_DOUBLE_EQ(fb.gemm_flops, 0.5 * fa.gemm_flops);
    // The final norm reads and writes every token's row; the loss's bytes halve.
    EXPECT_GT(fb.elementwise_bytes, 0.5 * fa.elementwise_bytes);
    EXPECT_LT(fb.elementwise_bytes, fa.elementwise_bytes);
    const OpWork ea = HeadEvaluationWork(a), eb = HeadEvaluationWork(b);
    EXPECT_DOUBLE_EQ(eb.gemm_flops, 0.5 * ea.gemm_flops);
    // The blocks do not change.
    EXPECT_DOUBLE_EQ(BlockForwardWork(b).gemm_flops, BlockForwardWork(a).gemm_flops);
  }
}

TEST(LossMaskProgramTest, TheStepIsShorterByTheHeadsShareAndItsMemoryTheSame) {
  const HardwareProfile profile = testing::Profile("h200-sxm-1gpu");
  const Plan all = OneGpu("llama3.2-1b", 4096, 4, 1.0), tenth = OneGpu("llama3.2-1b", 4096, 4, 0.1);
  const StepProgram pa = BuildStepProgram(all, profile), pt = BuildStepProgram(tenth, profile);
  const Estimate ea = EvaluateProgram(all, profile, pa), et = EvaluateProgram(tenth, profile, pt);
  // The 1B model's head (128k vocabulary) is a sixth or so of its step:
  // training a tenth of the targets saves most of it.
  EXPECT_LT(et.time.step_seconds, 0.9 * ea.time.step_seconds);
  EXPECT_GT(et.time.step_seconds, 0.7 * ea.time.step_seconds);
  // The same ops and tensors: a chunk's logits are as large while the
  // trained rows fill a chunk (1,638 of each micro-batch's 16,384 here,
  // against 1,024-token chunks). Not counted: the selected rows' copy and
  // its gradient, a few MiB (the peak is the logits' hundreds).
  ASSERT_EQ(pa.ops.size(), pt.ops.size());
  EXPECT_EQ(ReplayMemory(pa).peak, ReplayMemory(pt).peak);
}

TEST(LossMaskProgramTest, PlanFileKeepsTheShareAndRefusesOneOutsideZeroToOne) {
  const Plan masked = OneGpu("tiny-llama", 256, 2, 0.625);
  const nlohmann::json j = PlanToJson(masked);
  EXPECT_DOUBLE_EQ(j.at("trained_fraction").get<double>(), 0.625);
  EXPECT_DOUBLE_EQ(PlanFromJson(j, "plan").trained_fraction, 0.625);
  // Every target trained: the file is what it was before the field existed.
  EXPECT_FALSE(PlanToJson(OneGpu("tiny-llama", 256, 2, 1.0)).contains("trained_fraction"));
  EXPECT_DOUBLE_EQ(PlanFromJson(PlanToJson(OneGpu("tiny-llama", 256, 2, 1.0)), "plan").trained_fraction, 1.0);
  for (const double bad : {0.0, -0.5, 1.5}) {
    nlohmann::json b = j;
    b["trained_fraction"] = bad;
    try {
      PlanFromJson(b, "plan.json").Validate();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("trained_fraction"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace llmplan
