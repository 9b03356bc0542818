// Chunked cross-entropy equals the plain full-logits loss, in value and in the
// gradients w.r.t. the hidden states and the head weight, for chunk sizes that
// divide the token count, do not, and exceed it; and scales with the incoming
// gradient (as under gradient accumulation).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/model/chunked_cross_entropy.h"

namespace llmplan::executor {
namespace {

struct LossAndGrads {
  double loss;
  at::Tensor grad_hidden, grad_weight;
};

template <typename Fn>
LossAndGrads Evaluate(const at::Tensor& hidden, const at::Tensor& weight, double grad_scale, Fn loss_fn) {
  at::Tensor h = hidden.clone().requires_grad_(true);
  at::Tensor w = weight.clone().requires_grad_(true);
  at::Tensor loss = loss_fn(h, w);
  (loss * grad_scale).backward();
  return {loss.item<double>(), h.grad(), w.grad()};
}

TEST(ChunkedCrossEntropyTest, EqualsPlainLossAndGradients) {
  at::manual_seed(0);
  const int64_t n = 70, hidden_size = 32, vocab = 1000;
  at::Tensor hidden = at::randn({n, hidden_size}, at::kDouble);
  at::Tensor weight = at::randn({vocab, hidden_size}, at::kDouble) * 0.3;
  at::Tensor targets = at::randint(vocab, {n}, at::TensorOptions().dtype(at::kLong));
  for (double scale : {1.0, 0.25}) {
    LossAndGrads plain = Evaluate(hidden, weight, scale, [&](const at::Tensor& h, const at::Tensor& w) {
      return PlainCrossEntropy(h, w, targets);
    });
    for (int64_t chunk : {1, 7, 35, 70, 4096}) {
      LossAndGrads chunked = Evaluate(hidden, weight, scale, [&](const at::Tensor& h, const at::Tensor& w) {
        return ChunkedCrossEntropy(h, w, targets, chunk);
      });
      // The reference's logits are fp32 (as in training); tolerances fit that.
      EXPECT_NEAR(chunked.loss, plain.loss, 1e-5) << "chunk " << chunk;
      EXPECT_TRUE(at::allclose(chunked.grad_hidden, plain.grad_hidden, 1e-4, 1e-7)) << "chunk " << chunk;
      EXPECT_TRUE(at::allclose(chunked.grad_weight, plain.grad_weight, 1e-4, 1e-7)) << "chunk " << chunk;
    }
  }
}

// The executor hands the loss its weight's slice of the flat gradient
// (weight_grad_into): the same loss, and that buffer holds, bit for bit, the
// gradient the loss would have returned for autograd to add into zeros; the
// weight's own .grad gets nothing more. bf16, as on a GPU; a chunk that does
// not divide the tokens; and the backward's seed (1/grad_accum) applied in place.
TEST(ChunkedCrossEntropyTest, WritesTheWeightGradientIntoTheCallersBuffer) {
  at::manual_seed(1);
  const int64_t n = 45, hidden_size = 16, vocab = 300;
  const at::Tensor hidden = at::randn({n, hidden_size}).to(at::kBFloat16);
  const at::Tensor weight = (at::randn({vocab, hidden_size}) * 0.3).to(at::kBFloat16);
  const at::Tensor targets = at::randint(vocab, {n}, at::TensorOptions().dtype(at::kLong));
  for (double seed : {1.0, 0.5, 1.0 / 3}) {
    SCOPED_TRACE(seed);
    at::Tensor h1 = hidden.clone().requires_grad_(true), w1 = weight.clone().requires_grad_(true);
    at::Tensor loss1 = ChunkedCrossEntropy(h1, w1, targets, 16);
    torch::autograd::backward({loss1}, {at::full({}, seed, loss1.options())});
    // The flat gradient as the executor makes it: zeros, the weight's .grad a view of it.
    at::Tensor flat = at::zeros({vocab * hidden_size + 8}, weight.options());
    at::Tensor h2 = hidden.clone().requires_grad_(true), w2 = weight.clone().requires_grad_(true);
    at::Tensor into = flat.narrow(0, 8, vocab * hidden_size).view({vocab, hidden_size});
    w2.mutable_grad() = into;
    at::Tensor loss2 = ChunkedCrossEntropy(h2, w2, targets, 16, /*fused=*/false, into);
    torch::autograd::backward({loss2}, {at::full({}, seed, loss2.options())});
    EXPECT_TRUE(at::equal(loss1, loss2));
    EXPECT_TRUE(at::equal(h1.grad(), h2.grad()));
    EXPECT_TRUE(at::equal(w1.grad(), into));
    EXPECT_EQ(w2.grad().data_ptr(), into.data_ptr());  // autograd added nothing of its own
    EXPECT_TRUE(at::equal(flat.narrow(0, 0, 8), at::zeros({8}, flat.options())));
  }
  // A buffer of another shape is refused, not written past.
  at::Tensor w3 = weight.clone().requires_grad_(true);
  EXPECT_THROW(ChunkedCrossEntropy(hidden, w3, targets, 16, false, at::zeros({vocab, hidden_size + 1}, weight.options())),
               c10::Error);
}

// The seed the executor brings (known_seed: 1/grad_accum) is built into the
// gradients in the forward, and backward leaves them as they are: the same
// gradients as scaling after (fp32: the scale meets the softmax before the
// GEMMs instead of after them, ~1 ulp), the same loss, and into the
// caller's buffer too.
TEST(ChunkedCrossEntropyTest, AKnownSeedGivesTheSameGradientsWithoutScalingAfter) {
  at::manual_seed(2);
  const int64_t n = 45, hidden_size = 16, vocab = 300;
  const at::Tensor hidden = at::randn({n, hidden_size});
  const at::Tensor weight = at::randn({vocab, hidden_size}) * 0.3;
  const at::Tensor targets = at::randint(vocab, {n}, at::TensorOptions().dtype(at::kLong));
  for (double seed : {1.0, 0.5, 0.25}) {
    SCOPED_TRACE(seed);
    at::Tensor h1 = hidden.clone().requires_grad_(true), w1 = weight.clone().requires_grad_(true);
    at::Tensor loss1 = ChunkedCrossEntropy(h1, w1, targets, 16);
    torch::autograd::backward({loss1}, {at::full({}, seed, loss1.options())});
    at::Tensor h2 = hidden.clone().requires_grad_(true), w2 = weight.clone().requires_grad_(true);
    at::Tensor into = at::zeros({vocab, hidden_size});
    w2.mutable_grad() = into;
    at::Tensor loss2 = ChunkedCrossEntropy(h2, w2, targets, 16, /*fused=*/false, into, /*denominator=*/0, seed);
    torch::autograd::backward({loss2}, {at::full({}, seed, loss2.options())});
    EXPECT_TRUE(at::equal(loss1, loss2));
    EXPECT_TRUE(at::allclose(h2.grad(), h1.grad(), 1e-6, 1e-9));
    EXPECT_TRUE(at::allclose(into, w1.grad(), 1e-6, 1e-9));
    // Not scaled again: twice the seed's gradient would be far off.
    EXPECT_FALSE(at::allclose(into, w1.grad() * seed, 1e-3, 1e-9) && seed != 1.0);
  }
  EXPECT_THROW(ChunkedCrossEntropy(hidden, weight, targets, 16, false, {}, 0, -1.0), c10::Error);
}

TEST(ChunkedCrossEntropyTest, Bf16MatchesFp32WithinBf16Precision) {
  at::manual_seed(1);
  at::Tensor hidden = at::randn({64, 32});
  at::Tensor weight = at::randn({300, 32}) * 0.2;
  at::Tensor targets = at::randint(300, {64}, at::TensorOptions().dtype(at::kLong));
  const double fp32 = ChunkedCrossEntropy(hidden, weight, targets, 16).item<double>();
  at::Tensor loss16 = ChunkedCrossEntropy(hidden.to(at::kBFloat16), weight.to(at::kBFloat16), targets, 16);
  EXPECT_EQ(loss16.scalar_type(), at::kFloat);  // the loss itself is always fp32
  EXPECT_NEAR(loss16.item<double>(), fp32, 0.02 * fp32);
}

TEST(ChunkedCrossEntropyTest, RejectsMismatchedShapes) {
  at::Tensor hidden = at::randn({4, 8}), weight = at::randn({10, 9});
  at::Tensor targets = at::zeros({4}, at::TensorOptions().dtype(at::kLong));
  EXPECT_THROW(ChunkedCrossEntropy(hidden, weight, targets, 2), c10::Error);
  EXPECT_THROW(ChunkedCrossEntropy(hidden, at::randn({10, 8}), targets, 0), c10::Error);
}

}  // namespace
}  // namespace llmplan::executor
