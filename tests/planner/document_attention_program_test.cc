// Attention kept inside documents (Plan::attention) in the planner: each
// micro-batch's layout allocated at its embedding's forward and freed at its
// embedding's backward (an evaluation's head), the mask only where attention
// runs under one (the CPU), the attention priced by the documents' share of
// the window's tiles on a GPU, and the plan file keeping both fields.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "planner/memory_timeline.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/step_program.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

Plan OneGpu(const std::string& model, const std::string& profile, int64_t seq_len, int64_t micro_batch) {
  Plan p;
  p.model = PresetModel(model);
  p.profile = profile;
  p.gpus = 1;
  p.gpus_per_node = 1;
  p.strategy = ShardingStrategy::kNoShard;
  p.seq_len = seq_len;
  p.micro_batch = micro_batch;
  p.grad_accum = 2;
  NormaliseGrouping(p);
  p.Validate();
  return p;
}

Plan Documents(Plan p, double work) {
  p.attention = AttentionSpan::kDocuments;
  p.document_attention_work = work;
  p.Validate();
  return p;
}

TEST(DocumentAttentionProgramTest, LayoutsLiveFromEmbeddingForwardToItsBackward) {
  for (const char* profile_name : {"h200-sxm-1gpu", "cpu"}) {
    SCOPED_TRACE(profile_name);
    const HardwareProfile profile = testing::Profile(profile_name);
    const Plan window = OneGpu("tiny-llama", profile_name, 256, 2);
    const Plan documents = Documents(window, 0.5);
    const StepProgram pw = BuildStepProgram(window, profile), pd = BuildStepProgram(documents, profile);
    EXPECT_FALSE(pw.document_attention);
    EXPECT_TRUE(pd.document_attention);
    ASSERT_EQ(pw.ops.size(), pd.ops.size());  // the same ops, more memory
    const MemoryTimeline mw = ReplayMemory(pw), md = ReplayMemory(pd);
    // The step ends where it started: every layout freed.
    EXPECT_NEAR(md.after_op.back() - md.persistent, mw.after_op.back() - mw.persistent, 1.0);
    // On the GPU at least one layout is alive at the peak: its buffer, cos
    // and sin in bf16. (On the CPU the layout's mask replaces each block's
    // causal mask, and the peak can fall: executor/document_attention_test
    // holds every op's bytes to the measured ones there.)
    if (std::string(profile_name) != "cpu") {
      const double tokens = 2.0 * 256, head_dim = static_cast<double>(window.model.head_dim);
      EXPECT_GE(md.peak - mw.peak, 4 * (3 * tokens + 1) + 2 * 2 * tokens * head_dim - 1);
    }
  }
}

TEST(DocumentAttentionProgramTest, EvaluationFreesItsLayoutAfterTheHead) {
  for (const char* profile_name : {"h200-sxm-1gpu", "cpu"}) {
    SCOPED_TRACE(profile_name);
    const HardwareProfile profile = testing::Profile(profile_name);
    const Plan plan = Documents(OneGpu("tiny-llama", profile_name, 256, 2), 0.5);
    const StepProgram eval = BuildEvaluationProgram(plan, profile, 3);
    const MemoryTimeline memory = ReplayMemory(eval);
    EXPECT_NEAR(memory.after_op.back(), memory.persistent, 1.0);
    const StepProgram window_eval = BuildEvaluationProgram(OneGpu("tiny-llama", profile_name, 256, 2), profile, 3);
    EXPECT_GT(memory.peak, ReplayMemory(window_eval).peak);
  }
}

TEST(DocumentAttentionProgramTest, AttentionIsPricedByTheDocumentsShareOfTheTiles) {
  const HardwareProfile profile = testing::Profile("h200-sxm-1gpu");
  const Plan window = OneGpu("llama3.2-1b", "h200-sxm-1gpu", 8192, 1);
  const double t_window = EvaluateProgram(window, profile, BuildStepProgram(window, profile)).time.step_seconds;
  const Plan whole = Documents(window, 1.0);
  const double t_whole = EvaluateProgram(whole, profile, BuildStepProgram(whole, profile)).time.step_seconds;
  const Plan short_docs = Documents(window, 0.1);
  const double t_short = EvaluateProgram(short_docs, profile, BuildStepProgram(short_docs, profile)).time.step_seconds;
  // Documents as long as the window cost what the window does (the layout's
  // gathers are a few microseconds); short ones save most of attention's
  // share of the step, which at 8k tokens is a fifth or more.
  EXPECT_NEAR(t_whole, t_window, 0.01 * t_window);
  EXPECT_LT(t_short, 0.9 * t_window);
  // On the CPU attention runs under the mask: every tile, whatever the work.
  const HardwareProfile cpu = testing::Profile("cpu");
  const Plan cpu_plan = Documents(OneGpu("tiny-llama", "cpu", 256, 2), 0.1);
  const Plan cpu_whole = Documents(OneGpu("tiny-llama", "cpu", 256, 2), 1.0);
  EXPECT_DOUBLE_EQ(EvaluateProgram(cpu_plan, cpu, BuildStepProgram(cpu_plan, cpu)).time.step_seconds,
                   EvaluateProgram(cpu_whole, cpu, BuildStepProgram(cpu_whole, cpu)).time.step_seconds);
}

TEST(DocumentAttentionProgramTest, PlanFileKeepsTheAttention) {
  const Plan documents = Documents(OneGpu("tiny-llama", "h200-sxm-1gpu", 256, 2), 0.375);
  const nlohmann::json j = PlanToJson(documents);
  EXPECT_EQ(j.at("attention"), "documents");
  const Plan back = PlanFromJson(j, "plan");
  EXPECT_EQ(back.attention, AttentionSpan::kDocuments);
  EXPECT_DOUBLE_EQ(back.document_attention_work, 0.375);
  // A window plan's file is what it was before the field existed.
  EXPECT_FALSE(PlanToJson(OneGpu("tiny-llama", "h200-sxm-1gpu", 256, 2)).contains("attention"));
  nlohmann::json bad = j;
  bad["attention"] = "sliding";
  try {
    PlanFromJson(bad, "plan");
    FAIL() << "accepted attention \"sliding\"";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("window or documents"), std::string::npos) << e.what();
  }
  Plan zero = documents;
  zero.document_attention_work = 0;
  EXPECT_THROW(zero.Validate(), UserError);
}

}  // namespace
}  // namespace llmplan
