// The step's CUDA graph (Plan::cuda_graph; label gpu: runs on the device
// machine only): a run that captures its forward and backward once and
// replays them trains exactly as the same run issuing every kernel — the
// same losses, norms and parameters, step by step — and its memory is the
// memory model's (the graph's private pool included).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/sharding/shard_model.h"
#include "executor/step/step_interpreter.h"
#include "planner/memory_timeline.h"
#include "simulator/reserved_memory.h"
#include "tests/executor/core_test_support.h"

namespace llmplan::executor {
namespace {

using testing::TestPlan;

const at::Device kCuda(at::kCUDA, 0);

HardwareProfile GpuProfile() { return LoadHardwareProfile(std::string(LLMPLAN_SOURCE_DIR) + "/profiles/h200-sxm-1gpu.json"); }

struct GraphRig {
  GraphRig(const Plan& p, const HardwareProfile& profile)
      : plan(p),
        model(p.model),
        units(MakeShardedUnits(model, p, kCuda, 0)),
        optimizer(p.optimizer, ShardNumels(units), kCuda, /*allow_fused=*/true, false),
        program(BuildStepProgram(p, profile)),
        step(program, model, units, optimizer, kCuda) {}
  Plan plan;
  LlamaModel model;
  std::vector<FlatUnit> units;
  AdamW optimizer;
  StepProgram program;
  StepInterpreter step;
};

struct Shape {
  std::string name;
  ShardingStrategy strategy;
  int64_t grad_accum;
};

class CudaGraphGpuTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  Plan MakePlan(bool graph) const {
    Plan p = TestPlan("small-llama", 4, GetParam().grad_accum, 512, DType::kBF16);
    p.strategy = GetParam().strategy;
    p.cuda_graph = graph;
    p.Validate();
    return p;
  }
};

// Twenty steps: the first issues every op, the second captures, the rest
// replay. Every loss, norm and final parameter equals the run without the
// graph (the same kernels on the same inputs; at most bf16 noise).
TEST_P(CudaGraphGpuTest, ReplayedStepsTrainAsTheUngraphedOnes) {
  const HardwareProfile profile = GpuProfile();
  GraphRig eager(MakePlan(false), profile), graphed(MakePlan(true), profile);
  ASSERT_TRUE(graphed.program.cuda_graph);
  ASSERT_FALSE(eager.program.cuda_graph);
  int captured = 0;
  for (const StepOp& op : graphed.program.ops) captured += op.captured;
  ASSERT_GT(captured, 0);
  for (int s = 0; s < 20; ++s) {
    std::vector<at::Tensor> batches;
    for (int64_t mb = 0; mb < eager.plan.grad_accum; ++mb)
      batches.push_back(testing::RandomTokens(4, 512, eager.plan.model.vocab, 100 + 10 * s + mb));
    const StepResult a = eager.step.Run(batches);
    const StepResult b = graphed.step.Run(batches);
    EXPECT_NEAR(a.loss, b.loss, 1e-4 * std::abs(a.loss)) << "step " << s;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-3 * std::abs(a.grad_norm)) << "step " << s;
    // Every op ran and was measured, the replayed ones from the graph's marks.
    ASSERT_EQ(b.executed.size(), graphed.program.ops.size());
    for (const StepOp& op : graphed.program.ops) {
      const OpMeasurement& m = b.measurement.ops[op.id];
      ASSERT_TRUE(m.measured) << op.name << " step " << s;
      EXPECT_GE(m.end_s, m.start_s) << op.name << " step " << s;
    }
  }
  for (size_t u = 0; u < eager.units.size(); ++u) {
    const double diff = (eager.units[u].master() - graphed.units[u].master()).abs().max().item<double>();
    EXPECT_LE(diff, 1e-4) << "unit " << u;
  }
}

// What the graph changes in memory is what the memory model says it
// changes: the capture's own cuBLAS workspaces in allocated bytes, and in
// reserved bytes the graph's pool after the first step's cache was emptied.
// (How close the model comes for a whole plan is the accuracy suite's:
// docs/results/README.md.)
TEST_P(CudaGraphGpuTest, MemoryChangesAsPredicted) {
  const HardwareProfile profile = GpuProfile();
  struct Peaks {
    double allocated, reserved, predicted_allocated, predicted_reserved;
  };
  auto measure = [&](bool graph) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    Peaks p{};
    GraphRig rig(MakePlan(graph), profile);
    for (int s = 0; s < 4; ++s) {
      std::vector<at::Tensor> batches;
      for (int64_t mb = 0; mb < rig.plan.grad_accum; ++mb)
        batches.push_back(testing::RandomTokens(4, 512, rig.plan.model.vocab, 7 + s + mb));
      const StepResult r = rig.step.Run(batches);
      p.allocated = std::max(p.allocated, static_cast<double>(r.measurement.peak_allocated));
      p.reserved = std::max(p.reserved, static_cast<double>(r.measurement.peak_reserved));
    }
    p.predicted_allocated = ReplayMemory(rig.program).peak;
    p.predicted_reserved = ReplayAllocator(rig.plan, rig.program, 0).peak_reserved;
    std::printf("%s %s: peak allocated measured %.0f predicted %.0f; peak reserved measured %.0f predicted %.0f\n",
                GetParam().name.c_str(), graph ? "graph" : "eager", p.allocated, p.predicted_allocated, p.reserved,
                p.predicted_reserved);
    return p;
  };
  const Peaks eager = measure(false), graph = measure(true);
  EXPECT_NEAR(graph.allocated - eager.allocated, graph.predicted_allocated - eager.predicted_allocated,
              0.01 * eager.allocated);
  EXPECT_NEAR(graph.reserved - eager.reserved, graph.predicted_reserved - eager.predicted_reserved,
              0.05 * eager.reserved);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGraphGpuTest,
                         ::testing::Values(Shape{"no_shard", ShardingStrategy::kNoShard, 1},
                                           Shape{"no_shard_accumulating", ShardingStrategy::kNoShard, 2},
                                           Shape{"full_shard", ShardingStrategy::kFullShard, 1}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace llmplan::executor
