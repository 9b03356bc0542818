// Attention kept inside documents on CUDA (label gpu: runs on the device
// machine only): FlashAttention's variable-length kernel runs it in bf16, a
// packed window of documents agrees with the documents run on their own and
// with the CPU's masked attention, and every op's allocated bytes are the
// program's prediction (the layouts included).
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/data/micro_batch.h"
#include "executor/model/attention_layout.h"
#include "executor/model/llama_model.h"
#include "executor/sharding/shard_model.h"
#include "executor/step/step_interpreter.h"
#include "executor/torch_compat.h"
#include "planner/memory_timeline.h"
#include "tests/executor/core_test_support.h"

namespace llmplan::executor {
namespace {

using testing::TestPlan;

const at::Device kCuda(at::kCUDA, 0);

HardwareProfile GpuProfile() {
  return LoadHardwareProfile(std::string(LLMPLAN_SOURCE_DIR) + "/profiles/h200-sxm-1gpu.json");
}

struct GpuRig {
  GpuRig(const Plan& p, const HardwareProfile& profile, const at::Device& device)
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

class DocumentAttentionGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// Row r of `lengths`: its documents, packed from column 0.
at::Tensor Starts(const std::vector<std::vector<int64_t>>& lengths, int64_t t) {
  at::Tensor starts = at::zeros({static_cast<int64_t>(lengths.size()), t}, at::TensorOptions().dtype(at::kBool));
  for (size_t r = 0; r < lengths.size(); ++r) {
    int64_t at_token = 0;
    for (int64_t length : lengths[r]) {
      starts[static_cast<int64_t>(r)][at_token] = true;
      at_token += length;
    }
  }
  return starts;
}

// The block stack's output on `x` for every layer's parameters `params`.
at::Tensor Blocks(const LlamaModel& model, const std::vector<std::vector<at::Tensor>>& params, at::Tensor x,
                  const AttentionLayout& layout) {
  for (int layer = 0; layer < model.spec().layers; ++layer) x = model.BlockForward(layer, params[layer], x, layout);
  return x;
}

TEST_F(DocumentAttentionGpuTest, FlashVarlenAgreesWithDocumentsRunAlone) {
  ModelSpec spec = PresetModel("small-llama");  // grouped-query attention
  ASSERT_TRUE(compat::DocumentAttentionUsesFlash(kCuda, at::kBFloat16, spec.head_dim));
  const LlamaModel model(spec);
  const int64_t t = 256;
  const std::vector<std::vector<int64_t>> lengths = {{100, 156}, {17, 200, 39}};
  std::vector<std::vector<at::Tensor>> params;
  for (int layer = 0; layer < spec.layers; ++layer) {
    std::vector<at::Tensor> p;
    for (const ParamShape& s : model.unit_params(model.block_unit(layer)))
      p.push_back(at::empty(s.shape, at::TensorOptions().dtype(at::kBFloat16).device(kCuda)));
    model.InitUnit(model.block_unit(layer), p, 5);
    params.push_back(p);
  }
  at::Generator gen = at::detail::createCPUGenerator(9);
  const at::Tensor x = at::randn({2, t, spec.hidden}, gen).to(kCuda, at::kBFloat16);
  const RopeTable rope = model.MakeRopeTable(t, kCuda, at::kBFloat16);
  const AttentionLayout packed_layout = DocumentLayout(FindDocumentSpans(Starts(lengths, t), true), rope, kCuda, false);
  ASSERT_FALSE(packed_layout.hidden.defined());  // the flash kernel, no mask
  const at::Tensor packed = Blocks(model, params, x, packed_layout).to(at::kFloat);
  float worst = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    int64_t begin = 0;
    for (int64_t length : lengths[r]) {
      const at::Tensor alone =
          Blocks(model, params, x[static_cast<int64_t>(r)].narrow(0, begin, length).unsqueeze(0), WindowLayout(rope))
              .to(at::kFloat)[0];
      const at::Tensor same = packed[static_cast<int64_t>(r)].narrow(0, begin, length);
      worst = std::max(worst, ((alone - same).abs().max() / alone.abs().max()).item<float>());
      begin += length;
    }
  }
  // bf16 through four blocks: a few ulps of the largest activation.
  EXPECT_LT(worst, 3e-2);
  // And the documents matter: attending across them is far off.
  const at::Tensor whole = Blocks(model, params, x, WindowLayout(rope)).to(at::kFloat);
  EXPECT_GT(((whole[1].narrow(0, 17, 200) - packed[1].narrow(0, 17, 200)).abs().max() /
             packed[1].abs().max()).item<float>(),
            0.1);
}

TEST_F(DocumentAttentionGpuTest, TrainingLossAgreesWithTheCpusMaskedAttention) {
  Plan plan = TestPlan("tiny-qwen2", 2, 2, 128);
  plan.attention = AttentionSpan::kDocuments;
  plan.Validate();
  Plan gpu_plan = plan;
  gpu_plan.param_dtype = DType::kBF16;
  GpuRig cpu(plan, testing::CpuProfile(), at::Device(at::kCPU)), gpu(gpu_plan, GpuProfile(), kCuda);
  std::vector<at::Tensor> batches;
  for (int k = 0; k < 2; ++k) {
    at::Tensor b = testing::RandomTokens(2, 128, plan.model.vocab, 20 + k);
    for (int64_t column : {0, 30 + 20 * k, 90}) b[k][column] = b[k][column].item<int64_t>() | kDocumentStart;
    batches.push_back(b);
  }
  const double on_cpu = cpu.step.Run(batches).loss;
  const double on_gpu = gpu.step.Run(batches).loss;
  EXPECT_NEAR(on_gpu, on_cpu, 1e-2 * on_cpu);
}

TEST_F(DocumentAttentionGpuTest, EveryOpAllocatesThePredictedBytes) {
  Plan plan = TestPlan("small-llama", 4, 2, 512, DType::kBF16);
  plan.attention = AttentionSpan::kDocuments;
  plan.document_attention_work = 0.5;
  plan.checkpoint_layers = {1, 3};
  plan.Validate();
  const HardwareProfile profile = GpuProfile();
  GpuRig rig(plan, profile, kCuda);
  std::vector<at::Tensor> batches;
  for (int k = 0; k < 2; ++k) {
    at::Tensor b = testing::RandomTokens(4, 512, plan.model.vocab, 30 + k);
    for (int64_t row = 0; row < 4; ++row)
      for (int64_t column = 37 * (row + 1); column < 512; column += 150 + 13 * row)
        b[row][column] = b[row][column].item<int64_t>() | kDocumentStart;
    batches.push_back(b);
  }
  rig.step.Run(batches);  // warm-up
  const StepResult measured = rig.step.Run(batches);
  const MemoryTimeline predicted = ReplayMemory(rig.step.program());
  std::printf("documents: peak allocated measured %lld, predicted %.0f bytes\n",
              static_cast<long long>(measured.measurement.peak_allocated), predicted.peak);
  // The varlen backward's fp32 dq accumulator holds 128 rows more per
  // document piece than the window's ([heads, tokens + 128 pieces, D]): 2 MiB
  // for this step's 16 pieces of 8 heads x 32, measured on an H100
  // (2026-12-05: 229.8 MB against 227.6 MB predicted, 0.94%). The planner
  // does not model the attention backward's transients (the MLP's backward
  // is the block's highest point in every measured shape); on a model this
  // small with pieces this short the accumulator decides the peak.
  EXPECT_NEAR(static_cast<double>(measured.measurement.peak_allocated), predicted.peak, 0.015 * predicted.peak);
  for (const StepOp& op : rig.step.program().ops) {
    const OpMeasurement& m = measured.measurement.ops[op.id];
    EXPECT_NEAR(static_cast<double>(m.allocated), predicted.after_op[op.id], 0.01 * predicted.peak) << op.name;
  }
}

}  // namespace
}  // namespace llmplan::executor
