// The evaluation on CUDA (label gpu: runs on the device machine only): its
// loss agrees with the CPU's, a loss mask is honoured there too, and its peak
// allocated memory is the evaluation program's prediction (the issue's
// "memory the planner counts").
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/data/micro_batch.h"
#include "executor/sharding/shard_model.h"
#include "executor/step/step_interpreter.h"
#include "planner/memory_timeline.h"
#include "tests/executor/core_test_support.h"

namespace llmplan::executor {
namespace {

using testing::TestPlan;

const at::Device kCuda(at::kCUDA, 0);

// Model, units, optimizer and interpreter for `plan` on `device`, with the
// step program built for `profile` (so a CUDA run is predicted as one).
struct EvalRig {
  EvalRig(const Plan& p, const HardwareProfile& profile, const at::Device& device)
      : plan(p),
        model(p.model),
        units(MakeShardedUnits(model, p, device, 0)),
        optimizer(p.optimizer, ShardNumels(units), device, /*allow_fused=*/true, false),
        step(BuildStepProgram(p, profile), model, units, optimizer, device) {}
  Plan plan;
  LlamaModel model;
  std::vector<FlatUnit> units;
  AdamW optimizer;
  StepInterpreter step;
};

HardwareProfile GpuProfile() { return LoadHardwareProfile(std::string(LLMPLAN_SOURCE_DIR) + "/profiles/h200-sxm-1gpu.json"); }

class EvaluationGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(EvaluationGpuTest, LossAgreesWithTheCpusAndHonoursAMask) {
  const Plan plan = TestPlan("tiny-qwen2", 2, 1, 64);
  EvalRig cpu(plan, testing::CpuProfile(), at::Device(at::kCPU)), gpu(plan, GpuProfile(), kCuda);
  const StepProgram eval_cpu = BuildEvaluationProgram(plan, testing::CpuProfile(), 2);
  const StepProgram eval_gpu = BuildEvaluationProgram(plan, GpuProfile(), 2);
  std::vector<at::Tensor> batches = {testing::RandomTokens(2, 64, plan.model.vocab, 3),
                                     testing::RandomTokens(2, 64, plan.model.vocab, 4)};
  const double on_cpu = cpu.step.Evaluate(eval_cpu, batches).loss;
  const double on_gpu = gpu.step.Evaluate(eval_gpu, batches).loss;
  EXPECT_NEAR(on_cpu, on_gpu, 1e-4 * std::abs(on_cpu));
  // Half the targets masked: both devices agree, and the loss moves.
  std::vector<at::Tensor> masked;
  for (const at::Tensor& b : batches) {
    at::Tensor m = b.clone();
    m.narrow(1, 33, 32).bitwise_or_(kUntrainedTarget);
    masked.push_back(m);
  }
  const double masked_cpu = cpu.step.Evaluate(eval_cpu, masked).loss;
  const double masked_gpu = gpu.step.Evaluate(eval_gpu, masked).loss;
  EXPECT_NEAR(masked_cpu, masked_gpu, 1e-4 * std::abs(masked_cpu));
  EXPECT_GT(std::abs(masked_cpu - on_cpu), 1e-4);
}

TEST_F(EvaluationGpuTest, PeakAllocatedIsThePredictedOne) {
  Plan plan = TestPlan("small-llama", 4, 2, 512, DType::kBF16);
  const HardwareProfile profile = GpuProfile();
  EvalRig rig(plan, profile, kCuda);
  const StepProgram eval = BuildEvaluationProgram(plan, profile, 3);
  std::vector<at::Tensor> step_batches = {testing::RandomTokens(4, 512, plan.model.vocab, 1),
                                          testing::RandomTokens(4, 512, plan.model.vocab, 2)};
  std::vector<at::Tensor> eval_batches;
  for (int k = 0; k < 3; ++k) eval_batches.push_back(testing::RandomTokens(4, 512, plan.model.vocab, 10 + k));
  rig.step.Run(step_batches);  // a training step first, as a run evaluates after one
  rig.step.Evaluate(eval, eval_batches);  // warm-up
  const EvaluationResult measured = rig.step.Evaluate(eval, eval_batches);
  const MemoryTimeline predicted = ReplayMemory(eval);
  std::printf("evaluation peak allocated: measured %lld, predicted %.0f bytes\n",
              static_cast<long long>(measured.measurement.peak_allocated), predicted.peak);
  EXPECT_NEAR(static_cast<double>(measured.measurement.peak_allocated), predicted.peak, 0.01 * predicted.peak);
  // Op by op, after each op's issue.
  for (const StepOp& op : eval.ops) {
    const OpMeasurement& m = measured.measurement.ops[op.id];
    EXPECT_NEAR(static_cast<double>(m.allocated), predicted.after_op[op.id], 0.01 * predicted.peak) << op.name;
  }
}

}  // namespace
}  // namespace llmplan::executor
