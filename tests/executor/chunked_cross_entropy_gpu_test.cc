// The chunked cross-entropy's fused softmax kernel (cross_entropy_kernel.h)
// against the composite form on the same GPU (label gpu): the loss and both
// gradients in bf16 and fp32, for a vocabulary of whole 16-byte vectors and
// one of odd length (the scalar path), chunks that do and do not divide the
// tokens, and the forward alone (no gradient wanted).
#include <algorithm>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/model/chunked_cross_entropy.h"

namespace llmplan::executor {
namespace {

const at::Device kCuda(at::kCUDA, 0);

struct LossAndGrads {
  double loss;
  at::Tensor grad_hidden, grad_weight;
};

LossAndGrads Evaluate(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets, int64_t chunk,
                      bool fused) {
  at::Tensor h = hidden.clone().requires_grad_(true);
  at::Tensor w = weight.clone().requires_grad_(true);
  at::Tensor loss = ChunkedCrossEntropy(h, w, targets, chunk, fused);
  (loss * 0.5).backward();
  return {loss.item<double>(), h.grad().to(at::kFloat), w.grad().to(at::kFloat)};
}

double RelError(const at::Tensor& a, const at::Tensor& ref) {
  return (a - ref).abs().max().item<double>() / std::max(1e-30, ref.abs().max().item<double>());
}

TEST(ChunkedCrossEntropyGpuTest, FusedSoftmaxMatchesComposite) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(5);
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    for (const int64_t vocab : {32000, 1001}) {
      for (const int64_t chunk : {64, 300}) {
        SCOPED_TRACE(std::string(dtype == at::kFloat ? "fp32" : "bf16") + " vocab " + std::to_string(vocab) +
                     " chunk " + std::to_string(chunk));
        const int64_t n = 600, hidden_size = 256;
        const auto opts = at::TensorOptions().device(kCuda);
        const at::Tensor hidden = at::randn({n, hidden_size}, opts).to(dtype);
        const at::Tensor weight = (at::randn({vocab, hidden_size}, opts) * 0.2).to(dtype);
        const at::Tensor targets = at::randint(vocab, {n}, opts.dtype(at::kLong));
        const LossAndGrads f = Evaluate(hidden, weight, targets, chunk, true);
        const LossAndGrads c = Evaluate(hidden, weight, targets, chunk, false);
        // Same logits; only the log-sum-exp's summation order differs.
        EXPECT_NEAR(f.loss, c.loss, 1e-5 * c.loss);
        // The gradients round once from fp32 in both forms: in bf16 an
        // element may land one ulp apart, and d W sums those over chunks.
        const double tolerance = dtype == at::kFloat ? 1e-5 : 1e-2;
        EXPECT_LT(RelError(f.grad_hidden, c.grad_hidden), tolerance);
        EXPECT_LT(RelError(f.grad_weight, c.grad_weight), tolerance);
        // The forward alone (evaluation): the same loss, nothing written back.
        at::NoGradGuard no_grad;
        EXPECT_NEAR(ChunkedCrossEntropy(hidden, weight, targets, chunk, true).item<double>(), c.loss, 1e-5 * c.loss);
      }
    }
  }
}

// The fused form with the weight's gradient written into the caller's
// buffer (the executor's flat gradient): the same bits as the gradient it
// returns for autograd to add into zeros, with the seed of two micro-batches.
TEST(ChunkedCrossEntropyGpuTest, FusedWritesTheWeightGradientIntoTheCallersBuffer) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(6);
  const int64_t n = 600, hidden_size = 256, vocab = 32000;
  const auto opts = at::TensorOptions().device(kCuda);
  const at::Tensor hidden = at::randn({n, hidden_size}, opts).to(at::kBFloat16);
  const at::Tensor weight = (at::randn({vocab, hidden_size}, opts) * 0.2).to(at::kBFloat16);
  const at::Tensor targets = at::randint(vocab, {n}, opts.dtype(at::kLong));
  at::Tensor h1 = hidden.clone().requires_grad_(true), w1 = weight.clone().requires_grad_(true);
  at::Tensor loss1 = ChunkedCrossEntropy(h1, w1, targets, 256, true);
  (loss1 * 0.5).backward();
  at::Tensor flat = at::zeros({vocab * hidden_size + 256}, weight.options());
  at::Tensor into = flat.narrow(0, 256, vocab * hidden_size).view({vocab, hidden_size});
  at::Tensor h2 = hidden.clone().requires_grad_(true), w2 = weight.clone().requires_grad_(true);
  w2.mutable_grad() = into;
  at::Tensor loss2 = ChunkedCrossEntropy(h2, w2, targets, 256, true, into);
  (loss2 * 0.5).backward();
  EXPECT_TRUE(at::equal(loss1, loss2));
  EXPECT_TRUE(at::equal(h1.grad(), h2.grad()));
  EXPECT_TRUE(at::equal(w1.grad(), into));
  EXPECT_EQ(w2.grad().data_ptr(), into.data_ptr());
  EXPECT_EQ(flat.narrow(0, 0, 256).count_nonzero().item<int64_t>(), 0);
}

}  // namespace
}  // namespace llmplan::executor
