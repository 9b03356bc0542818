// AddProjection on a GPU in bf16, which goes through cuBLASLt's separate C
// and D (executor/model/residual_gemm_cuda.h), against ATen's at::addmm and an
// fp64 reference (label gpu: the device machine only):
//   - the sum is as close to fp64 as addmm's, at a 1B block's shapes, at odd
//     ones and at operands only 2-byte aligned;
//   - the residual is read, never written, and the result is a new tensor;
//   - the call allocates its output and nothing else (ATen's workspace);
//   - gradients equal residual + linear's.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/model/projections.h"
#include "executor/torch_compat.h"

namespace llmplan::executor {
namespace {

const at::Device kCuda(at::kCUDA, 0);

class ResidualGemmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    at::manual_seed(11);
  }
};

at::Tensor Randn(at::IntArrayRef shape) {
  return at::randn(shape, at::TensorOptions().dtype(at::kFloat).device(kCuda)).to(at::kBFloat16);
}

// max |a - ref| / max |ref|, in fp64.
double RelError(const at::Tensor& a, const at::Tensor& ref) {
  const at::Tensor r = ref.to(at::kDouble);
  return (a.to(at::kDouble) - r).abs().max().item<double>() / std::max(1e-30, r.abs().max().item<double>());
}

// A [rows, cols] bf16 tensor whose data starts `offset` elements into a
// larger buffer: offset 1 gives an operand only 2-byte aligned.
at::Tensor Shifted(int64_t rows, int64_t cols, int64_t offset) {
  const at::Tensor buffer = Randn({rows * cols + offset});
  return buffer.narrow(0, offset, rows * cols).view({rows, cols});
}

TEST_F(ResidualGemmGpuTest, SumIsAsCloseToFp64AsAddmmAtEveryShapeAndAlignment) {
  // rows, in, out, element offset of x (alignment)
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> cases = {
      {16384, 2048, 2048, 0},  // a Llama-3.2-1B micro-batch's o projection
      {4096, 8192, 2048, 0},   // its down projection, fewer rows
      {37, 24, 40, 0},         // sizes no tile divides
      {512, 64, 128, 1},       // x only 2-byte aligned
      {1, 8, 8, 3},            // one row
  };
  for (const auto& [rows, in, out, offset] : cases) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(in) + " -> " + std::to_string(out) + ", offset " +
                 std::to_string(offset));
    const at::Tensor x = Shifted(rows, in, offset), weight = Randn({out, in}), residual = Randn({rows, out});
    const at::Tensor residual_before = residual.clone();
    const at::Tensor y = AddProjection(residual, x, weight);
    const at::Tensor reference = residual.to(at::kDouble) + x.to(at::kDouble).mm(weight.to(at::kDouble).t());
    const at::Tensor addmm = at::addmm(residual, x, weight.t());
    ASSERT_EQ(y.sizes(), residual.sizes());
    ASSERT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_NE(y.data_ptr(), residual.data_ptr());
    EXPECT_TRUE(at::equal(residual, residual_before)) << "the residual was written";
    const double error = RelError(y, reference), addmm_error = RelError(addmm, reference);
    EXPECT_LE(error, 1.5 * addmm_error + 1e-3) << "addmm's error " << addmm_error;
    EXPECT_LE(error, 1e-2);
  }
}

TEST_F(ResidualGemmGpuTest, AllocatesItsOutputAndNothingElse) {
  const int64_t rows = 8192, in = 2048, out = 2048;
  const at::Tensor x = Randn({rows, in}), weight = Randn({out, in}), residual = Randn({rows, out});
  (void)AddProjection(residual, x, weight);  // the stream's workspace and the shape's algorithm, once
  torch::cuda::synchronize();
  const int64_t before = compat::ReadMemoryStats(kCuda, 0).allocated;
  compat::ResetMemoryPeaks(kCuda);
  const at::Tensor y = AddProjection(residual, x, weight);
  torch::cuda::synchronize();
  const compat::MemoryStats after = compat::ReadMemoryStats(kCuda, 0);
  const int64_t output_bytes = rows * out * 2;
  EXPECT_EQ(after.allocated - before, output_bytes);
  EXPECT_EQ(after.peak_allocated - before, output_bytes) << "a temporary beside the output";
}

TEST_F(ResidualGemmGpuTest, GradientsEqualResidualPlusLinear) {
  const int64_t rows = 1024, in = 512, out = 256;
  const at::Tensor x0 = Randn({2, rows / 2, in}), w0 = Randn({out, in}), r0 = Randn({2, rows / 2, out});
  at::Tensor xa = x0.clone().requires_grad_(true), wa = w0.clone().requires_grad_(true),
             ra = r0.clone().requires_grad_(true);
  at::Tensor xb = x0.clone().requires_grad_(true), wb = w0.clone().requires_grad_(true),
             rb = r0.clone().requires_grad_(true);
  const at::Tensor y = AddProjection(ra, xa, wa);
  const at::Tensor reference = rb + at::linear(xb, wb);
  EXPECT_LE(RelError(y, reference), 1e-2);
  const at::Tensor g = Randn(y.sizes());
  torch::autograd::backward({y}, {g});
  torch::autograd::backward({reference}, {g});
  EXPECT_TRUE(at::equal(ra.grad(), rb.grad()));
  EXPECT_LE(RelError(xa.grad(), xb.grad()), 1e-2);
  EXPECT_LE(RelError(wa.grad(), wb.grad()), 1e-2);
}

}  // namespace
}  // namespace llmplan::executor
