// The fused block kernels (executor/model/block_ops_cuda.cc) against LibTorch's
// composite ops on the same GPU (label gpu: the device machine only):
//   - forward outputs equal the composite's (bit-for-bit where the rounding
//     allows: RoPE and SwiGLU in bf16; RMSNorm up to its row sum's order);
//   - gradients at least as close to an fp64 reference as the composite's;
//   - the packed q/k/v and gate/up ops equal the composite ops on their parts;
//   - a whole block's forward and backward agree across the two forms;
//   - what a block keeps for backward is what the planner's memory model
//     counts for each form (planner/memory_model.h), on the caching allocator.
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/model/block_ops.h"
#include "executor/model/llama_model.h"
#include "executor/torch_compat.h"
#include "planner/hardware_profile.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan::executor {
namespace {

const at::Device kCuda(at::kCUDA, 0);
constexpr BlockOpsForm kFused = BlockOpsForm::kFused;
constexpr BlockOpsForm kComposite = BlockOpsForm::kComposite;

class BlockOpsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    at::manual_seed(7);
  }
};

at::Tensor Randn(at::IntArrayRef shape, at::ScalarType dtype) {
  return at::randn(shape, at::TensorOptions().dtype(at::kFloat).device(kCuda)).to(dtype);
}

// max |a - ref| / max |ref|, in fp64.
double RelError(const at::Tensor& a, const at::Tensor& ref) {
  const at::Tensor r = ref.to(at::kDouble);
  return (a.to(at::kDouble) - r).abs().max().item<double>() / std::max(1e-30, r.abs().max().item<double>());
}

// Fraction of elements exactly equal.
double EqualFraction(const at::Tensor& a, const at::Tensor& b) {
  return a.eq(b).to(at::kDouble).mean().item<double>();
}

// Runs `op` on leaf copies of `inputs` (requires_grad) with gradient `grad`;
// returns the output followed by each input's gradient.
template <typename Op>
std::vector<at::Tensor> ForwardBackward(Op op, const std::vector<at::Tensor>& inputs, const at::Tensor& grad) {
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& t : inputs) leaves.push_back(t.detach().clone().requires_grad_(true));
  at::Tensor out = op(leaves);
  torch::autograd::backward({out}, {grad.to(out.scalar_type())});
  std::vector<at::Tensor> result = {out.detach()};
  for (const at::Tensor& l : leaves) result.push_back(l.grad());
  return result;
}

// The fused op's gradients are within `slack` x the composite's error (in the
// same dtype) of an fp64 composite reference, and below `ceiling`.
template <typename Op>
void ExpectGradientsAsAccurate(Op op, const std::vector<at::Tensor>& inputs, const at::Tensor& grad, double ceiling) {
  auto fused = ForwardBackward([&](const auto& x) { return op(kFused, x); }, inputs, grad);
  auto composite = ForwardBackward([&](const auto& x) { return op(kComposite, x); }, inputs, grad);
  std::vector<at::Tensor> inputs64;
  for (const at::Tensor& t : inputs) inputs64.push_back(t.to(at::kDouble));
  auto reference = ForwardBackward([&](const auto& x) { return op(kComposite, x); }, inputs64, grad.to(at::kDouble));
  for (size_t i = 1; i < reference.size(); ++i) {
    if (!reference[i].defined()) continue;
    const double ef = RelError(fused[i], reference[i]), ec = RelError(composite[i], reference[i]);
    std::printf("  gradient %zu: fused %.3g, composite %.3g (relative to max)\n", i - 1, ef, ec);
    EXPECT_LE(ef, 1.5 * ec + 1e-6) << "gradient of input " << i - 1;
    EXPECT_LT(ef, ceiling) << "gradient of input " << i - 1;
  }
}

TEST_F(BlockOpsGpuTest, RmsNormMatchesCompositeAndItsGradientsAreAsAccurate) {
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const int64_t cols : {64, 2048, 4096, 8192, 16384}) {
      if (dtype == at::kFloat && cols > 8192) continue;  // 2 x 1024 vectors of 4 fp32
      SCOPED_TRACE(std::string(dtype == at::kFloat ? "fp32" : "bf16") + " cols " + std::to_string(cols));
      const at::Tensor x = Randn({3, 37, cols}, dtype) * 3;
      const at::Tensor w = (Randn({cols}, at::kFloat) * 0.1 + 1).to(dtype);
      ASSERT_EQ(BlockOpsFormFor(true, x, cols, 64), kFused);
      const at::Tensor f = RmsNorm(kFused, x, w, 1e-5), c = RmsNorm(kComposite, x, w, 1e-5);
      // The row sums run in another order, so 1/rms may differ in its last
      // bit: in bf16 an element rarely rounds differently (measured on H200:
      // none at these shapes); in fp32 most do, by an ulp (measured: 15-39%).
      if (dtype == at::kBFloat16) EXPECT_GE(EqualFraction(f, c), 0.99);
      EXPECT_TRUE(at::allclose(f.to(at::kFloat), c.to(at::kFloat), dtype == at::kFloat ? 1e-5 : 1e-2, 1e-6));
      const at::Tensor g = Randn({3, 37, cols}, dtype);
      ExpectGradientsAsAccurate(
          [](BlockOpsForm form, const std::vector<at::Tensor>& in) { return RmsNorm(form, in[0], in[1], 1e-5); },
          {x, w}, g, dtype == at::kFloat ? 1e-5 : 2e-2);
    }
  }
}

// Many rows: the kernel writes its most partial rows (1,056), which one
// small kernel sums per column into the weight's gradient (block_kernels.h,
// LaunchSumPartialRows); as accurate as the composite's, in bf16 and fp32.
TEST_F(BlockOpsGpuTest, RmsNormWeightGradientOverManyRowsIsAsAccurate) {
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(dtype == at::kFloat ? "fp32" : "bf16");
    const int64_t cols = 2048;
    const at::Tensor x = Randn({8, 1024, cols}, dtype) * 3;
    const at::Tensor w = (Randn({cols}, at::kFloat) * 0.1 + 1).to(dtype);
    ASSERT_EQ(BlockOpsFormFor(true, x, cols, 64), kFused);
    ExpectGradientsAsAccurate(
        [](BlockOpsForm form, const std::vector<at::Tensor>& in) { return RmsNorm(form, in[0], in[1], 1e-5); }, {x, w},
        Randn({8, 1024, cols}, dtype), dtype == at::kFloat ? 1e-5 : 2e-2);
  }
}

// The norm on the residual stream: x's gradient is the norm's plus the
// residual stream's, equal bit for bit to autograd's sum of the two (the
// fused norm, then an add), and the second output is x itself.
TEST_F(BlockOpsGpuTest, RmsNormOnResidualAddsTheResidualGradientAsAutogradWould) {
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const int64_t cols : {64, 2048, 8192}) {
      SCOPED_TRACE(std::string(dtype == at::kFloat ? "fp32" : "bf16") + " cols " + std::to_string(cols));
      const at::Tensor x0 = Randn({2, 29, cols}, dtype) * 3;
      const at::Tensor w0 = (Randn({cols}, at::kFloat) * 0.1 + 1).to(dtype);
      const at::Tensor g_norm = Randn({2, 29, cols}, dtype), g_residual = Randn({2, 29, cols}, dtype);
      // Separate: the fused norm, and x used again by the residual add.
      at::Tensor xs = x0.clone().requires_grad_(true), ws = w0.clone().requires_grad_(true);
      at::Tensor ns = RmsNorm(kFused, xs, ws, 1e-5);
      torch::autograd::backward({ns, xs * 1}, {g_norm, g_residual});
      // Fused: both gradients into the norm's backward.
      at::Tensor xf = x0.clone().requires_grad_(true), wf = w0.clone().requires_grad_(true);
      const auto [nf, rf] = RmsNormOnResidual(kFused, xf, wf, 1e-5);
      EXPECT_EQ(rf.data_ptr(), xf.data_ptr());
      EXPECT_TRUE(at::equal(nf, ns));
      torch::autograd::backward({nf, rf * 1}, {g_norm, g_residual});
      EXPECT_TRUE(at::equal(xf.grad(), xs.grad()));
      EXPECT_TRUE(at::equal(wf.grad(), ws.grad()));
      // Without a residual gradient it is the plain norm's.
      at::Tensor xn = x0.clone().requires_grad_(true), wn = w0.clone().requires_grad_(true);
      const auto [nn, rn] = RmsNormOnResidual(kFused, xn, wn, 1e-5);
      (void)rn;
      torch::autograd::backward({nn}, {g_norm});
      at::Tensor xp = x0.clone().requires_grad_(true), wp = w0.clone().requires_grad_(true);
      torch::autograd::backward({RmsNorm(kFused, xp, wp, 1e-5)}, {g_norm});
      EXPECT_TRUE(at::equal(xn.grad(), xp.grad()));
    }
  }
}

TEST_F(BlockOpsGpuTest, RopeMatchesCompositeBitForBitInBf16) {
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const int64_t head_dim : {64, 128}) {
      SCOPED_TRACE(std::string(dtype == at::kFloat ? "fp32" : "bf16") + " head_dim " + std::to_string(head_dim));
      ModelSpec spec = PresetModel("llama3.2-1b");
      spec.head_dim = head_dim;
      const int64_t t = 33;
      const RopeTable table = LlamaModel(spec).MakeRopeTable(64, kCuda, dtype);
      const at::Tensor cos = table.cos.narrow(0, 0, t), sin = table.sin.narrow(0, 0, t);
      const at::Tensor x = Randn({2, t, 6, head_dim}, dtype);
      const at::Tensor f = ApplyRope(kFused, x, cos, sin), c = ApplyRope(kComposite, x, cos, sin);
      if (dtype == at::kBFloat16) {
        EXPECT_TRUE(at::equal(f, c)) << (f.to(at::kFloat) - c.to(at::kFloat)).abs().max().item<double>();
      } else {
        // nvcc may contract a product and a sum into one FMA: 1 ulp.
        EXPECT_TRUE(at::allclose(f, c, 1e-6, 1e-6));
      }
      const at::Tensor g = Randn({2, t, 6, head_dim}, dtype);
      // The tables are constants: the reference rotates with the same
      // (rounded) cos and sin in fp64.
      ExpectGradientsAsAccurate(
          [&](BlockOpsForm form, const std::vector<at::Tensor>& in) {
            return ApplyRope(form, in[0], cos.to(in[0].scalar_type()), sin.to(in[0].scalar_type()));
          },
          {x}, g, dtype == at::kFloat ? 1e-6 : 1e-2);
    }
  }
}

TEST_F(BlockOpsGpuTest, SwiGluMatchesCompositeOnAlignedAndUnalignedBuffers) {
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const int64_t offset : {0, 1}) {  // 1: not 16-byte aligned, the scalar path
      SCOPED_TRACE(std::string(dtype == at::kFloat ? "fp32" : "bf16") + " offset " + std::to_string(offset));
      const int64_t n = 3 * 5 * 1000 + 3;  // not a whole number of vectors either
      const at::Tensor gate = Randn({n + offset}, dtype).narrow(0, offset, n) * 4;
      const at::Tensor up = Randn({n + offset}, dtype).narrow(0, offset, n);
      ASSERT_TRUE(gate.is_contiguous());
      const at::Tensor f = SwiGlu(kFused, gate, up), c = SwiGlu(kComposite, gate, up);
      EXPECT_GE(EqualFraction(f, c), 0.999);
      EXPECT_TRUE(at::allclose(f.to(at::kFloat), c.to(at::kFloat), dtype == at::kFloat ? 1e-6 : 8e-3, 1e-6));
      const at::Tensor g = Randn({n}, dtype);
      ExpectGradientsAsAccurate(
          [](BlockOpsForm form, const std::vector<at::Tensor>& in) { return SwiGlu(form, in[0], in[1]); }, {gate, up},
          g, dtype == at::kFloat ? 1e-5 : 1e-2);
    }
  }
}

// The packed q/k/v form: one kernel pass rotating q's and k's heads out of
// the packed projection's rows and copying v's, against the composite RoPE
// of each head group cut out of it.
TEST_F(BlockOpsGpuTest, QkvRopeMatchesCompositeRopeOfEachHeadGroup) {
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const int64_t head_dim : {64, 128}) {
      SCOPED_TRACE(std::string(dtype == at::kFloat ? "fp32" : "bf16") + " head_dim " + std::to_string(head_dim));
      ModelSpec spec = PresetModel("llama3.2-1b");
      spec.head_dim = head_dim;
      const int64_t t = 33, heads = 6, kv_heads = 2;
      const RopeTable table = LlamaModel(spec).MakeRopeTable(64, kCuda, dtype);
      const at::Tensor cos = table.cos.narrow(0, 0, t), sin = table.sin.narrow(0, 0, t);
      // q, k, v of each token side by side, flattened back into the packed
      // layout so that one gradient drives all three.
      auto op = [&](BlockOpsForm form, const std::vector<at::Tensor>& in) {
        const at::Tensor c = cos.to(in[0].scalar_type()), s = sin.to(in[0].scalar_type());
        at::Tensor q, k, v;
        if (form == kFused) {
          std::tie(q, k, v) = QkvRope(in[0], c, s, heads, kv_heads);
        } else {
          const int64_t qd = heads * head_dim, kvd = kv_heads * head_dim;
          q = ApplyRope(kComposite, in[0].narrow(2, 0, qd).reshape({2, t, heads, head_dim}), c, s);
          k = ApplyRope(kComposite, in[0].narrow(2, qd, kvd).reshape({2, t, kv_heads, head_dim}), c, s);
          v = in[0].narrow(2, qd + kvd, kvd).reshape({2, t, kv_heads, head_dim});
        }
        return at::cat({q.flatten(2), k.flatten(2), v.flatten(2)}, 2);
      };
      const at::Tensor qkv = Randn({2, t, (heads + 2 * kv_heads) * head_dim}, dtype);
      const at::Tensor f = op(kFused, {qkv}), c = op(kComposite, {qkv});
      if (dtype == at::kBFloat16) {
        EXPECT_TRUE(at::equal(f, c)) << (f.to(at::kFloat) - c.to(at::kFloat)).abs().max().item<double>();
      } else {
        EXPECT_TRUE(at::allclose(f, c, 1e-6, 1e-6));  // an FMA's ulp, as RoPE's
      }
      ExpectGradientsAsAccurate(op, {qkv}, Randn(qkv.sizes(), dtype), dtype == at::kFloat ? 1e-6 : 1e-2);
    }
  }
}

// The packed gate/up form against the composite SwiGLU of the two halves,
// on rows whose length is and is not a whole number of 16-byte vectors.
TEST_F(BlockOpsGpuTest, SwiGluPackedMatchesSwiGluOfItsHalves) {
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const int64_t inter : {512, 1003}) {  // 1003: the scalar path
      SCOPED_TRACE(std::string(dtype == at::kFloat ? "fp32" : "bf16") + " inter " + std::to_string(inter));
      auto op = [&](BlockOpsForm form, const std::vector<at::Tensor>& in) {
        if (form == kFused) return SwiGluPacked(in[0]);
        return SwiGlu(kComposite, in[0].narrow(-1, 0, inter), in[0].narrow(-1, inter, inter));
      };
      const at::Tensor gate_up = Randn({3, 37, 2 * inter}, dtype) * 4;
      const at::Tensor f = op(kFused, {gate_up}), c = op(kComposite, {gate_up});
      EXPECT_GE(EqualFraction(f, c), 0.999);
      EXPECT_TRUE(at::allclose(f.to(at::kFloat), c.to(at::kFloat), dtype == at::kFloat ? 1e-6 : 8e-3, 1e-6));
      ExpectGradientsAsAccurate(op, {gate_up}, Randn({3, 37, inter}, dtype), dtype == at::kFloat ? 1e-5 : 1e-2);
    }
  }
}

// One Llama-3.2-1B block in bf16, fused against composite: the output and
// every gradient within bf16 noise of each other, and what each keeps for
// backward (allocated after the forward, graph held) equal to the planner's
// count for that form. The parameters lie in one flat buffer, as a unit's do.
TEST_F(BlockOpsGpuTest, BlockAgreesAcrossFormsAndKeepsWhatThePlannerCounts) {
  ModelSpec spec = PresetModel("llama3.2-1b");
  const int64_t batch = 2, seq = 1024;
  spec.layers = 1;
  std::vector<std::vector<at::Tensor>> grads(2);
  std::vector<at::Tensor> outputs(2);
  const HardwareProfile h200 = LoadHardwareProfile(std::string(LLMPLAN_SOURCE_DIR) + "/profiles/h200-sxm.json");
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "composite");
    const LlamaModel model(spec, fused);
    const int unit = model.block_unit(0);
    // In one flat buffer, as a FlatUnit holds them: the fused form then
    // uses q/k/v and gate/up in place as one matrix each.
    const at::Tensor flat = at::empty({model.UnitNumel(unit)}, at::TensorOptions().dtype(at::kBFloat16).device(kCuda));
    std::vector<at::Tensor> params;
    int64_t offset = 0;
    for (const ParamShape& shape : model.unit_params(unit)) {
      std::vector<int64_t> strides(shape.shape.size(), 1);
      for (int d = static_cast<int>(shape.shape.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape.shape[d + 1];
      params.push_back(at::empty({0}, flat.options()).set_(flat.storage(), offset, shape.shape, strides));
      offset += shape.numel();
    }
    model.InitUnit(unit, params, /*seed=*/3);
    for (at::Tensor& p : params) p.requires_grad_(true);
    const RopeTable rope = model.MakeRopeTable(seq, kCuda, at::kBFloat16);
    at::manual_seed(11);
    at::Tensor x = Randn({batch, seq, spec.hidden}, at::kBFloat16).requires_grad_(true);
    {
      // A first pass, dropped: the libraries' first-use workspaces (cuBLAS)
      // are not the block's.
      at::Tensor warm = model.BlockForward(0, params, x, rope);
      torch::autograd::backward({warm}, {at::ones_like(warm)});
    }
    x.mutable_grad().reset();
    for (at::Tensor& p : params) p.mutable_grad().reset();
    compat::SynchronizeDevice(kCuda);
    const int64_t before = compat::ReadMemoryStats(kCuda, 0).allocated;
    at::Tensor y = model.BlockForward(0, params, x, rope);
    compat::SynchronizeDevice(kCuda);
    const double kept = static_cast<double>(compat::ReadMemoryStats(kCuda, 0).allocated - before);
    Plan plan;
    plan.model = spec;
    plan.gpus = 1;
    plan.micro_batch = batch;
    plan.seq_len = seq;
    plan.fused_kernels = fused;
    NormaliseGrouping(plan);
    const double predicted = BlockActivations(plan, h200).full;
    std::printf("  kept for backward: %.1f MiB measured, %.1f MiB predicted\n", kept / (1 << 20), predicted / (1 << 20));
    // Each tensor rounds up to 512 bytes in the caching allocator; the
    // recorded-runs test allows 4 MiB per op likewise.
    EXPECT_NEAR(kept, predicted, std::max(4.0 * (1 << 20), 0.01 * predicted));
    torch::autograd::backward({y}, {at::ones_like(y) * 0.01});
    outputs[fused] = y.detach();
    grads[fused].push_back(x.grad());
    for (at::Tensor& p : params) grads[fused].push_back(p.grad());
  }
  EXPECT_LT(RelError(outputs[1], outputs[0]), 2e-2);
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_LT(RelError(grads[1][i], grads[0][i]), 5e-2) << "gradient " << i;
}

}  // namespace
}  // namespace llmplan::executor
