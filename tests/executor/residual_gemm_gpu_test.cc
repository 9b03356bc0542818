// AddProjection on a GPU in bf16, which goes through cuBLASLt's separate C
// and D (executor/model/residual_gemm_cuda.h), against ATen's at::addmm and an
// fp64 reference (label gpu: the device machine only):
//   - the sum is as close to fp64 as addmm's, at a 1B block's shapes, at odd
//     ones and at operands only 2-byte aligned;
//   - the residual is read, never written, and the result is a new tensor;
//   - the call allocates its output and nothing else once the stream's
//     cuBLASLt workspace is there; the stream's first call adds exactly that
//     workspace (what the profile's workspace_bytes counts), nothing more;
//   - gradients equal residual + linear's.
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

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

// On a stream that has run an ATen GEMM (as a block's q/k/v projection runs
// before its o projection), the first AddProjection takes the stream's
// cuBLASLt workspace, which stays allocated, and nothing else: the executor's
// step holds one per stream it computes on, and the memory model counts it in
// memory.workspace_bytes. A leak or a second buffer would show here.
TEST_F(ResidualGemmGpuTest, FirstCallOnAStreamKeepsOnlyItsCublasLtWorkspace) {
  const int64_t rows = 4096, in = 2048, out = 2048;
  const at::Tensor x = Randn({rows, in}), weight = Randn({out, in}), residual = Randn({rows, out});
  torch::cuda::synchronize();
  const c10::cuda::CUDAStream fresh = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0);
  const c10::cuda::CUDAStreamGuard on_fresh(fresh);
  (void)at::linear(x, weight);  // the stream's cuBLAS workspace, as a step's first GEMM takes it
  torch::cuda::synchronize();
  const int64_t before = compat::ReadMemoryStats(kCuda, 0).allocated;
  at::Tensor y = AddProjection(residual, x, weight);
  torch::cuda::synchronize();
  const int64_t output_bytes = rows * out * 2;
  const int64_t kept = compat::ReadMemoryStats(kCuda, 0).allocated - before - output_bytes;
  const int64_t lt_workspace = static_cast<int64_t>(compat::CurrentBlasLt().workspace_bytes);
  std::printf("first AddProjection on a stream kept %lld bytes besides its output; cuBLASLt workspace %lld\n",
              static_cast<long long>(kept), static_cast<long long>(lt_workspace));
  // 0 where LibTorch shares the cuBLAS workspace with cuBLASLt.
  EXPECT_TRUE(kept == lt_workspace || kept == 0) << kept;
  y = at::Tensor();
  torch::cuda::synchronize();
  const int64_t settled = compat::ReadMemoryStats(kCuda, 0).allocated;
  (void)AddProjection(residual, x, weight);
  torch::cuda::synchronize();
  EXPECT_EQ(compat::ReadMemoryStats(kCuda, 0).allocated, settled) << "a second call kept more";
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
