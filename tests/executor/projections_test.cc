// The fused form's projections (executor/model/projections.h) against
// at::linear and an add, on the CPU in fp64 (one GEMM and three agree there
// to the rounding of another summation blocking, far below what the test
// allows): the output, the input's gradient, every weight's and bias's
// gradient — with the weights back to back in one flat buffer (used in
// place, as a unit's flat buffer lays out q, k, v) and as separate tensors
// (concatenated), with and without biases; and with .grad buffers already
// there (a unit's flat gradient), which the backward GEMM adds into.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "executor/model/projections.h"

namespace llmplan::executor {
namespace {

const auto kF64 = at::TensorOptions().dtype(at::kDouble);

// As FlatUnit makes a unit's parameters and their .grad: leaves over a flat
// buffer's storage (not views of it, whose version counter in-place writes
// would bump).
at::Tensor Over(const at::Tensor& flat, int64_t offset, int64_t rows, int64_t cols) {
  return at::empty({0}, flat.options()).set_(flat.storage(), offset, {rows, cols}, {cols, 1});
}

struct Projections {
  at::Tensor flat, flat_grad;  // the weights' storage and their gradients' when in one buffer
  std::vector<at::Tensor> weights, biases;
};

// Weights [rows_i, in] (leaves needing grad), back to back in one buffer or
// as separate tensors, optionally a bias each, optionally .grad buffers
// holding `grad_start` (in one buffer, like the weights, when they are).
Projections MakeProjections(const std::vector<int64_t>& rows, int64_t in, bool in_one_buffer, bool with_biases,
                            bool with_grads = false, double grad_start = 0) {
  Projections p;
  int64_t total = 0;
  for (int64_t r : rows) total += r * in;
  p.flat = at::randn({total}, kF64);
  p.flat_grad = at::full({total}, grad_start, kF64);
  int64_t offset = 0;
  for (int64_t r : rows) {
    at::Tensor w = Over(p.flat, offset, r, in);
    at::Tensor g = Over(p.flat_grad, offset, r, in);
    offset += r * in;
    p.weights.push_back((in_one_buffer ? w : w.clone()).requires_grad_(true));
    if (with_grads) p.weights.back().mutable_grad() = in_one_buffer ? g : g.clone();
    if (with_biases) p.biases.push_back(at::randn({r}, kF64).requires_grad_(true));
  }
  return p;
}

void ExpectClose(const at::Tensor& a, const at::Tensor& b, const char* what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(at::allclose(a, b, 1e-12, 1e-12)) << what << ": max difference " << (a - b).abs().max().item<double>();
}

struct Case {
  bool in_one_buffer = true, with_biases = false, with_grads = false;
};

void ExpectPackedEqualsSeparateLinears(const Case& c) {
  SCOPED_TRACE(std::string(c.in_one_buffer ? "one buffer" : "separate") + (c.with_biases ? ", biases" : "") +
               (c.with_grads ? ", .grad buffers" : ""));
  at::manual_seed(3);
  const std::vector<int64_t> rows = {48, 16, 16};  // q, k, v of a GQA block: k and v narrower
  const int64_t in = 32;
  const double start = c.with_grads ? 0.25 : 0;  // what the .grad buffers hold before
  Projections packed = MakeProjections(rows, in, c.in_one_buffer, c.with_biases, c.with_grads, start);
  std::vector<at::Tensor> weights, biases;
  for (const at::Tensor& w : packed.weights) weights.push_back(w.detach().clone().requires_grad_(true));
  for (const at::Tensor& b : packed.biases) biases.push_back(b.detach().clone().requires_grad_(true));
  const at::Tensor x0 = at::randn({2, 5, in}, kF64);
  at::Tensor xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);

  const at::Tensor y = PackedLinear(xa, packed.weights, packed.biases);
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < rows.size(); ++i)
    parts.push_back(at::linear(xb, weights[i], c.with_biases ? biases[i] : at::Tensor()));
  const at::Tensor reference = at::cat(parts, -1);
  ExpectClose(y, reference, "output");

  const at::Tensor g = at::randn(y.sizes(), kF64);
  torch::autograd::backward({y}, {g});
  torch::autograd::backward({reference}, {g});
  ExpectClose(xa.grad(), xb.grad(), "input gradient");
  for (size_t i = 0; i < rows.size(); ++i) {
    ExpectClose(packed.weights[i].grad(), weights[i].grad() + start, "weight gradient");
    if (c.with_biases) ExpectClose(packed.biases[i].grad(), biases[i].grad(), "bias gradient");
  }
  if (c.with_grads && c.in_one_buffer) {
    // Added into the flat gradient itself, not into a new .grad.
    ExpectClose(packed.flat_grad.narrow(0, 0, rows[0] * in).view({rows[0], in}), weights[0].grad() + start,
                "the flat gradient");
  }
}

TEST(ProjectionsTest, PackedLinearEqualsSeparateLinears) {
  for (const bool one_buffer : {true, false})
    for (const bool biases : {false, true})
      for (const bool grads : {false, true}) ExpectPackedEqualsSeparateLinears({one_buffer, biases, grads});
}

TEST(ProjectionsTest, AddProjectionEqualsLinearThenAdd) {
  for (const bool with_grad : {false, true}) {
    SCOPED_TRACE(with_grad ? ".grad buffer" : "no .grad");
    at::manual_seed(4);
    Projections p = MakeProjections({12}, 20, true, false, with_grad, 0.5);
    at::Tensor w2 = p.weights[0].detach().clone().requires_grad_(true);
    const at::Tensor r0 = at::randn({3, 4, 12}, kF64), x0 = at::randn({3, 4, 20}, kF64);
    at::Tensor ra = r0.clone().requires_grad_(true), rb = r0.clone().requires_grad_(true);
    at::Tensor xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);
    const at::Tensor y = AddProjection(ra, xa, p.weights[0]);
    const at::Tensor reference = rb + at::linear(xb, w2);
    ExpectClose(y, reference, "output");
    const at::Tensor g = at::randn(y.sizes(), kF64);
    torch::autograd::backward({y}, {g});
    torch::autograd::backward({reference}, {g});
    ExpectClose(ra.grad(), rb.grad(), "residual gradient");
    ExpectClose(xa.grad(), xb.grad(), "input gradient");
    ExpectClose(p.weights[0].grad(), w2.grad() + (with_grad ? 0.5 : 0.0), "weight gradient");
  }
}

// Inside a buffer the weights are used in place: the product reads the
// buffer's current values, so an in-place update of the buffer (a gather
// before backward) shows in the backward's input gradient.
TEST(ProjectionsTest, InPlaceWeightsAreReadAtBackwardTime) {
  at::manual_seed(5);
  Projections p = MakeProjections({8, 8}, 4, /*in_one_buffer=*/true, /*with_biases=*/false);
  at::Tensor x = at::randn({3, 4}, kF64).requires_grad_(true);
  const at::Tensor y = PackedLinear(x, p.weights, {});
  {
    at::NoGradGuard no_grad;
    p.flat.mul_(2);
  }
  torch::autograd::backward({y}, {at::ones_like(y)});
  ExpectClose(x.grad(), at::ones({3, 16}, kF64).mm(p.flat.view({16, 4})), "input gradient with the buffer's new values");
}

TEST(ProjectionsTest, OnlyTheGradientsAskedForAreMade) {
  Projections p = MakeProjections({6, 2}, 4, true, false);
  const at::Tensor x = at::randn({3, 4}, kF64);  // no gradient wanted
  const at::Tensor y = PackedLinear(x, p.weights, {});
  torch::autograd::backward({y}, {at::ones_like(y)});
  ASSERT_TRUE(p.weights[0].grad().defined());
  EXPECT_EQ(p.weights[1].grad().sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(ProjectionsTest, MismatchedShapesAreRefused) {
  const at::Tensor x = at::randn({3, 4}, kF64);
  EXPECT_THROW(PackedLinear(x, {at::randn({2, 5}, kF64)}, {}), c10::Error);
  EXPECT_THROW(PackedLinear(x, {at::randn({2, 4}, kF64)}, {at::randn({2}, kF64), at::randn({2}, kF64)}), c10::Error);
  EXPECT_THROW(AddProjection(at::randn({3, 5}, kF64), x, at::randn({6, 4}, kF64)), c10::Error);
}

}  // namespace
}  // namespace llmplan::executor
