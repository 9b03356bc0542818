// The evaluation's program (BuildEvaluationProgram): forward only, every
// unit gathered, run and released once per micro-batch, nothing that writes
// the training state, and a peak below the training step's in every shape
// the planner builds (the "never above training's peak").
#include <algorithm>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/step_program.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

struct Shape {
  std::string model;
  int gpus;
  ShardingStrategy strategy;
  Offload offload;
  bool checkpoint_all;
  std::string profile;
};

Plan PlanOf(const Shape& s) {
  Plan p;
  p.model = PresetModel(s.model);
  p.profile = s.profile;
  p.gpus = s.gpus;
  p.gpus_per_node = 8;
  p.strategy = s.strategy;
  p.offload = s.offload;
  p.seq_len = 256;
  p.micro_batch = 2;
  p.grad_accum = 2;
  if (s.checkpoint_all)
    for (int l = 0; l < p.model.layers; ++l) p.checkpoint_layers.push_back(l);
  NormaliseGrouping(p);
  p.Validate();
  return p;
}

std::vector<Shape> Shapes() {
  return {
      {"tiny-llama", 1, ShardingStrategy::kNoShard, Offload::kNone, false, "h100-sxm-80g"},
      {"tiny-llama", 4, ShardingStrategy::kFullShard, Offload::kNone, false, "h100-sxm-80g"},
      {"tiny-llama", 4, ShardingStrategy::kFullShard, Offload::kNone, true, "h100-sxm-80g"},
      {"tiny-llama", 4, ShardingStrategy::kShardGradOp, Offload::kNone, false, "h100-sxm-80g"},
      {"tiny-llama", 2, ShardingStrategy::kFullShard, Offload::kOptimizer, false, "h100-sxm-80g"},
      {"tiny-llama", 2, ShardingStrategy::kFullShard, Offload::kOptimizerAndParams, false, "h100-sxm-80g"},
      {"tiny-qwen2", 2, ShardingStrategy::kFullShard, Offload::kNone, false, "h100-sxm-80g"},  // tied embedding
      {"tiny-llama", 1, ShardingStrategy::kNoShard, Offload::kNone, false, "cpu"},
      {"llama3.2-1b", 1, ShardingStrategy::kNoShard, Offload::kNone, false, "h200-sxm-1gpu"},
      {"llama3.2-1b", 8, ShardingStrategy::kFullShard, Offload::kNone, true, "h100-sxm-80g"},
  };
}

std::string Name(const Shape& s) {
  return s.model + " x" + std::to_string(s.gpus) + " " + StrategyName(s.strategy) + " offload " +
         OffloadName(s.offload) + (s.checkpoint_all ? " ckpt all" : "") + " on " + s.profile;
}

TEST(EvaluationProgramTest, RunsEachUnitForwardOnceAndNothingElse) {
  for (const Shape& shape : Shapes()) {
    SCOPED_TRACE(Name(shape));
    const Plan plan = PlanOf(shape);
    const HardwareProfile profile = testing::Profile(shape.profile);
    const int micro_batches = 3;
    const StepProgram eval = BuildEvaluationProgram(plan, profile, micro_batches);
    EXPECT_TRUE(eval.evaluation);
    EXPECT_EQ(eval.micro_batches, micro_batches);
    std::map<std::pair<int, int>, int> forwards;  // (unit, mb) -> count
    int gathers = 0, releases = 0, loss_reductions = 0;
    for (const StepOp& op : eval.ops) {
      switch (op.kind) {
        case OpKind::kForward: ++forwards[{op.unit, op.micro_batch}]; break;
        case OpKind::kAllGather: ++gathers; break;
        case OpKind::kRelease: ++releases; break;
        case OpKind::kAllReduceLoss: ++loss_reductions; break;
        case OpKind::kCopyParamsForGather: break;
        default: ADD_FAILURE() << "op " << op.name << " (" << OpKindName(op.kind) << ") in an evaluation";
      }
      for (int dep : op.deps) EXPECT_LT(dep, op.id) << op.name;
    }
    const int units = static_cast<int>(eval.units.size());
    EXPECT_EQ(forwards.size(), static_cast<size_t>(units * micro_batches));
    for (const auto& [key, count] : forwards) EXPECT_EQ(count, 1);
    EXPECT_EQ(gathers, releases) << "every gathered unit is released";
    EXPECT_EQ(loss_reductions, plan.gpus > 1 ? 1 : 0);
  }
}

TEST(EvaluationProgramTest, FreesEverythingItAllocatesAndPeaksBelowTheTrainingStep) {
  for (const Shape& shape : Shapes()) {
    SCOPED_TRACE(Name(shape));
    const Plan plan = PlanOf(shape);
    const HardwareProfile profile = testing::Profile(shape.profile);
    const StepProgram eval = BuildEvaluationProgram(plan, profile, plan.grad_accum);
    const MemoryTimeline memory = ReplayMemory(eval);
    ASSERT_FALSE(memory.after_op.empty());
    // Nothing is kept for a backward: the op stream ends where it started.
    EXPECT_NEAR(memory.after_op.back(), memory.persistent, 1.0);
    const Estimate evaluated = EvaluateProgram(plan, profile, eval);
    const Estimate trained = EvaluateProgram(plan, profile, BuildStepProgram(plan, profile));
    EXPECT_LT(evaluated.memory.peak_allocated_bytes, trained.memory.peak_allocated_bytes);
    EXPECT_LE(evaluated.memory.peak_reserved_bytes, trained.memory.peak_reserved_bytes);
    // The same micro-batches forward only: less than the step's forward,
    // backward and update.
    EXPECT_GT(evaluated.time.step_seconds, 0);
    EXPECT_LT(evaluated.time.step_seconds, trained.time.step_seconds);
  }
}

TEST(EvaluationProgramTest, IsNotCountedAsTheRunsStepProgram) {
  const Plan plan = PlanOf(Shapes()[0]);
  const HardwareProfile profile = testing::Profile("h100-sxm-80g");
  const int64_t before = StepProgramsBuilt();
  BuildEvaluationProgram(plan, profile, 2);
  EXPECT_EQ(StepProgramsBuilt(), before);
}

TEST(EvaluationProgramTest, TimeGrowsWithItsMicroBatches) {
  const Plan plan = PlanOf(Shapes()[8]);
  const HardwareProfile profile = testing::Profile("h200-sxm-1gpu");
  const double one = EvaluateProgram(plan, profile, BuildEvaluationProgram(plan, profile, 1)).time.step_seconds;
  const double four = EvaluateProgram(plan, profile, BuildEvaluationProgram(plan, profile, 4)).time.step_seconds;
  EXPECT_GT(four, 3.5 * one);
  EXPECT_LT(four, 4.5 * one);
}

}  // namespace
}  // namespace llmplan
