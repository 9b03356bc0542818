// AdamW on flat buffers equals torch::optim::AdamW; the warmup + cosine
// schedule; global-norm clipping; FlatUnit's flat gradient plumbing.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/sharding/flat_unit.h"
#include "executor/optimizer/adamw.h"
#include "executor/optimizer/cpu_adamw.h"

namespace llmplan::executor {
namespace {

TEST(AdamWTest, MatchesTorchOptimAdamWOverSeveralSteps) {
  OptimizerConfig c;
  c.lr = 1e-2;
  c.warmup_steps = 0;
  c.decay_steps = 1000000;  // lr practically constant over 5 steps
  c.min_lr_ratio = 1.0;     // exactly constant
  c.weight_decay = 0.1;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  at::manual_seed(3);
  at::Tensor init = at::randn({1000});
  at::Tensor master = init.clone();
  AdamW ours(c, {1000}, at::Device(at::kCPU));

  torch::Tensor ref = init.clone().requires_grad_(true);
  torch::optim::AdamW reference({ref}, torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(
                                           c.weight_decay));
  for (int step = 0; step < 5; ++step) {
    at::Tensor grad = at::randn({1000});
    EXPECT_DOUBLE_EQ(ours.CurrentLearningRate(), c.lr);
    ours.Update(0, master, grad);
    ours.FinishStep();
    ref.mutable_grad() = grad.clone();
    reference.step();
  }
  EXPECT_EQ(ours.state().step, 5);
  EXPECT_TRUE(at::allclose(master, ref.detach(), 1e-5, 1e-7)) << (master - ref.detach()).abs().max().item<double>();
}

TEST(AdamWTest, OffloadedThreadedCpuLoopMatchesWholeBufferOps) {
  // The host (offload) path: the threaded loop of cpu_adamw.cc on state in
  // host memory, 300k elements so several threads each take a chunk, and the
  // compute copy it writes. Agrees with the ATen path to fp32 rounding.
  OptimizerConfig c;
  c.lr = 1e-2;
  c.warmup_steps = 2;
  c.weight_decay = 0.1;
  const int64_t n = 300001;  // odd: the last chunk is short
  at::manual_seed(5);
  at::Tensor a = at::randn({n}), b = a.clone();
  AdamW device_form(c, {n}, at::Device(at::kCPU), /*allow_fused=*/false);
  AdamW host_form(c, {n}, at::Device(at::kCPU), /*allow_fused=*/true, /*state_on_host=*/true);
  at::Tensor copy = at::zeros({n}, at::kBFloat16);
  for (int step = 0; step < 4; ++step) {
    at::Tensor grad = at::randn({n});
    device_form.Update(0, a, grad);
    host_form.Update(0, b, grad, copy);
    device_form.FinishStep();
    host_form.FinishStep();
  }
  EXPECT_LT((a - b).abs().max().item<double>(), 1e-6);
  EXPECT_TRUE(at::allclose(host_form.state().exp_avg_sq[0], device_form.state().exp_avg_sq[0], 1e-5, 1e-9));
  EXPECT_TRUE(at::equal(copy, b.to(at::kBFloat16)));
}

TEST(AdamWTest, HostBf16CopyRoundsExactlyAsLibTorch) {
  // The CPU loop writes the bf16 compute copy itself: it must equal
  // LibTorch's cast bit for bit, on the values where rounding is decided.
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* tie, even below */,
                               1.01171875f /* tie, odd below */, 3.4028235e38f /* rounds to inf */,
                               std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::denorm_min(), 1e-40f, 65504.0f, 3.14159265f};
  at::manual_seed(9);
  at::Tensor random = at::randn({100000}) * 1e3;
  for (int64_t i = 0; i < random.numel(); ++i) values.push_back(random[i].item<float>());
  at::Tensor in = at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, at::kFloat).clone();
  at::Tensor theirs = in.to(at::kBFloat16);
  const auto* bits = static_cast<const uint16_t*>(theirs.data_ptr());
  auto is_nan = [](uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; };
  for (int64_t i = 0; i < in.numel(); ++i) {
    const float x = in[i].item<float>();
    if (std::isnan(x)) {  // any NaN is a NaN: LibTorch's scalar and vector casts differ in its bits
      EXPECT_TRUE(is_nan(FloatToBf16Bits(x)) && is_nan(bits[i]));
      continue;
    }
    ASSERT_EQ(FloatToBf16Bits(x), bits[i]) << "value " << x;
  }
}

TEST(AdamWTest, HostFp32CopyEqualsTheMaster) {
  OptimizerConfig c;
  c.warmup_steps = 0;
  const int64_t n = 200003;
  at::manual_seed(6);
  at::Tensor master = at::randn({n});
  at::Tensor copy = at::zeros({n});
  AdamW host_form(c, {n}, at::Device(at::kCPU), /*allow_fused=*/true, /*state_on_host=*/true);
  host_form.Update(0, master, at::randn({n}), copy);
  EXPECT_TRUE(at::equal(copy, master));
  at::Tensor wrong = at::zeros({n - 1}, at::kBFloat16);
  EXPECT_THROW(host_form.Update(0, master, at::randn({n}), wrong), c10::Error);
}

TEST(AdamWTest, WarmupThenCosineToMinimum) {
  OptimizerConfig c;
  c.lr = 1.0;
  c.min_lr_ratio = 0.1;
  c.warmup_steps = 10;
  c.decay_steps = 110;
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 9), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 10), 1.0);        // cosine starts at the peak
  EXPECT_NEAR(LearningRateAt(c, 60), 0.55, 1e-12);     // half way: (1 + 0.1) / 2
  EXPECT_NEAR(LearningRateAt(c, 110), 0.1, 1e-12);     // end
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 5000), 0.1);      // constant after
  for (int64_t s = 11; s < 110; ++s) EXPECT_LE(LearningRateAt(c, s), LearningRateAt(c, s - 1));
}

TEST(AdamWTest, ClipsByGlobalNormAcrossBuffers) {
  OptimizerConfig c;
  c.grad_clip = 1.0;
  AdamW opt(c, {2, 1}, at::Device(at::kCPU));
  at::Tensor a = at::tensor({3.0f, 0.0f}), b = at::tensor({4.0f});
  EXPECT_NEAR(opt.ClipGradients({a, b}), 5.0, 1e-6);
  EXPECT_NEAR(at::cat({a, b}).norm().item<double>(), 1.0, 1e-5);
  c.grad_clip = 0;  // disabled: norm reported, nothing scaled
  AdamW off(c, {1}, at::Device(at::kCPU));
  at::Tensor g = at::tensor({10.0f});
  EXPECT_NEAR(off.ClipGradients({g}), 10.0, 1e-6);
  EXPECT_FLOAT_EQ(g.item<float>(), 10.0f);
}

TEST(FlatUnitTest, ParametersViewOneBufferAndGradientsAccumulateInPlace) {
  std::vector<ParamShape> shapes = {{"a", {2, 3}, ParamInit::kNormal}, {"b", {5}, ParamInit::kOnes}};
  FlatUnit unit(shapes, /*group_size=*/4, /*rank=*/0, at::Device(at::kCPU), at::kFloat);
  EXPECT_EQ(unit.numel(), 11);
  EXPECT_EQ(unit.padded_numel(), 12);  // multiple of the group size
  EXPECT_EQ(unit.shard_numel(), 3);

  FlatUnit local(shapes, 1, 0, at::Device(at::kCPU), at::kBFloat16);
  auto views = local.MasterViews();
  views[0].fill_(2.0);
  views[1].fill_(-1.0);
  local.GatherLocal();
  const auto& p = local.params();
  EXPECT_EQ(p[0].scalar_type(), at::kBFloat16);
  EXPECT_TRUE(p[0].requires_grad() && p[0].is_leaf());
  EXPECT_EQ(p[1].sum().item<double>(), -5.0);

  const void* grad_storage = local.compute_grad().data_ptr();
  for (int mb = 0; mb < 2; ++mb) {
    at::Tensor loss = (p[0].to(at::kFloat) * 3.0).sum() + p[1].to(at::kFloat).sum();
    loss.backward();
    // Autograd added into the flat buffer instead of allocating new .grad.
    EXPECT_EQ(p[0].grad().data_ptr(), grad_storage);
    local.ReduceGradientsLocal();
  }
  at::Tensor expected = at::cat({at::full({6}, 6.0), at::full({5}, 2.0)});
  EXPECT_TRUE(at::equal(local.grad(), expected));
  EXPECT_EQ(local.compute_grad().abs().sum().item<double>(), 0.0);
  local.ZeroGradients();
  EXPECT_EQ(local.grad().abs().sum().item<double>(), 0.0);

  // Released between backwards (how the executor runs unsharded units): the
  // bytes go, come back zeroed, and accumulation is unchanged.
  for (int mb = 0; mb < 2; ++mb) {
    local.MaterializeComputeGrad();
    at::Tensor loss = (p[0].to(at::kFloat) * 3.0).sum() + p[1].to(at::kFloat).sum();
    loss.backward();
    local.ReduceGradientsLocal(/*release=*/true);
    EXPECT_FALSE(local.compute_grad_materialized());
  }
  EXPECT_TRUE(at::equal(local.grad(), expected));
  EXPECT_THROW(local.ReduceGradientsLocal(), c10::Error);  // nothing to reduce while released
}

TEST(FlatUnitTest, CastAtGatherKeepsNoComputeShardAndSendsTheMastersCast) {
  std::vector<ParamShape> shapes = {{"a", {2, 3}, ParamInit::kNormal}, {"b", {5}, ParamInit::kOnes}};
  FlatUnitOptions options;
  options.group_size = 2;
  options.rank = 1;
  options.compute_dtype = at::kBFloat16;
  FlatUnit kept(shapes, options, at::Device(at::kCPU));
  options.cast_at_gather = true;
  FlatUnit cast(shapes, options, at::Device(at::kCPU));
  EXPECT_TRUE(kept.compute_shard().defined());
  EXPECT_FALSE(cast.compute_shard().defined());  // the 2 bytes a parameter it saves
  // Values that bf16 rounds (to nearest even): the cast sent equals the
  // shard an update refreshes, bit for bit.
  const at::Tensor owned = at::linspace(-1.001, 2.003, kept.owned_numel(), at::kFloat);
  kept.SetMasterOwned(owned);
  cast.SetMasterOwned(owned);
  const at::Tensor sent = cast.CastShardForGather();
  EXPECT_EQ(sent.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(sent, kept.compute_shard()));
  // A whole unit has nothing to gather; an offloaded master is not on the device.
  options.group_size = 1;
  options.rank = 0;
  EXPECT_THROW(FlatUnit(shapes, options, at::Device(at::kCPU)), c10::Error);
  options.group_size = 2;
  options.master_on_host = true;
  EXPECT_THROW(FlatUnit(shapes, options, at::Device(at::kCPU)), c10::Error);
}

}  // namespace
}  // namespace llmplan::executor
