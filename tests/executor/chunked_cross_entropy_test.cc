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
