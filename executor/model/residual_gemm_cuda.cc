// ResidualGemm (see residual_gemm_cuda.h): one cuBLASLt matmul, D = A B + C,
// with the descriptors and the heuristic's algorithm made once per shape.
#include "executor/model/residual_gemm_cuda.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <cublasLt.h>

#include "executor/torch_compat.h"

namespace llmplan::executor::fused {
namespace {

void CheckLt(cublasStatus_t status, const char* what) {
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "ResidualGemm: ", what, " failed with cuBLAS status ",
              static_cast<int>(status));
}

// The widest power of two up to 16 bytes dividing the address: cuBLASLt's
// fast kernels load 16-byte vectors, which a less aligned operand cannot
// feed, so the heuristic must know.
uint32_t AlignmentOf(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// One shape's matmul: descriptors and the algorithm cuBLASLt's heuristic
// chose, made once (the heuristic alone costs tens of microseconds of host
// time, as much as issuing a 1B block's whole forward).
struct LtMatmul {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, cd = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;

  LtMatmul() = default;
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  ~LtMatmul() {
    if (cd != nullptr) cublasLtMatrixLayoutDestroy(cd);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

// rows, out, in, dtype, the four operands' alignments, workspace bytes, device.
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int, uint32_t, uint32_t, uint32_t, uint32_t, size_t, int>;

// cuBLASLt is column-major; PyTorch's tensors are row-major. A row-major
// [r, c] matrix is a column-major c x r one, so with m = out, n = rows,
// k = in: D^T (m x n) = op(W) (m x k, W stored k x m, transposed) times
// x^T (k x n, stored so) plus residual^T (m x n) — the same mapping ATen's
// at::linear uses.
std::unique_ptr<LtMatmul> MakeMatmul(cublasLtHandle_t handle, const ShapeKey& key) {
  const auto [rows, out, in, dtype, align_a, align_b, align_c, align_d, workspace_bytes, device] = key;
  (void)device;
  const auto type = static_cast<cudaDataType_t>(dtype);
  auto m = std::make_unique<LtMatmul>();
  CheckLt(cublasLtMatmulDescCreate(&m->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  CheckLt(cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)),
          "setting TRANSA");
  CheckLt(cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)), "setting TRANSB");
  CheckLt(cublasLtMatrixLayoutCreate(&m->a, type, in, out, in), "the weight's layout");
  CheckLt(cublasLtMatrixLayoutCreate(&m->b, type, in, rows, in), "the input's layout");
  CheckLt(cublasLtMatrixLayoutCreate(&m->cd, type, out, rows, out), "the output's layout");

  cublasLtMatmulPreference_t preference = nullptr;
  CheckLt(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const uint64_t max_workspace = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                       sizeof(max_workspace));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                       sizeof(align_a));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                       sizeof(align_b));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                       sizeof(align_c));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                       sizeof(align_d));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, m->desc, m->a, m->b, m->cd, m->cd, preference, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(preference);
  m->found = status == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (m->found) m->algo = result.algo;
  return m;
}

}  // namespace

at::Tensor ResidualGemm(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(residual.is_cuda() && x.is_cuda() && weight.is_cuda() && residual.is_contiguous() &&
                  x.is_contiguous() && weight.is_contiguous(),
              "ResidualGemm: contiguous CUDA tensors only");
  TORCH_CHECK(residual.scalar_type() == x.scalar_type() && x.scalar_type() == weight.scalar_type() &&
                  (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf),
              "ResidualGemm: bf16 or fp16 tensors of one dtype only");
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  TORCH_CHECK(weight.size(1) == in && residual.size(0) == rows && residual.size(1) == out,
              "ResidualGemm: residual [rows, out], x [rows, in] and weight [out, in] do not fit");
  const c10::cuda::CUDAGuard guard(x.device());
  if (rows == 0) return at::empty_like(residual);

  // ATen's handle and the current stream's cuBLASLt workspace (allocated by
  // ATen at the stream's first call and kept: compat::CurrentBlasLt).
  const compat::BlasLtContext lt = compat::CurrentBlasLt();
  if (lt.handle == nullptr) return at::Tensor();
  cublasLtHandle_t handle = lt.handle;

  const cudaDataType_t type = x.scalar_type() == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  const ShapeKey key{rows,
                     out,
                     in,
                     static_cast<int>(type),
                     AlignmentOf(weight.data_ptr()),
                     AlignmentOf(x.data_ptr()),
                     AlignmentOf(residual.data_ptr()),
                     16u,  // y: a new block of the caching allocator, 512-byte aligned
                     lt.workspace_bytes,
                     static_cast<int>(x.device().index())};
  static std::mutex mutex;
  static std::map<ShapeKey, std::unique_ptr<LtMatmul>> matmuls;
  const LtMatmul* matmul = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    std::unique_ptr<LtMatmul>& entry = matmuls[key];
    if (!entry) entry = MakeMatmul(handle, key);
    matmul = entry.get();  // entries live as long as the map: never erased
  }
  if (!matmul->found) return at::Tensor();
  at::Tensor y = at::empty_like(residual);

  const float alpha = 1.0f, beta = 1.0f;
  CheckLt(cublasLtMatmul(handle, matmul->desc, &alpha, weight.data_ptr(), matmul->a, x.data_ptr(), matmul->b, &beta,
                         residual.data_ptr(), matmul->cd, y.data_ptr(), matmul->cd, &matmul->algo, lt.workspace,
                         lt.workspace_bytes, at::cuda::getCurrentCUDAStream(x.device().index()).stream()),
          "cublasLtMatmul");
  return y;
}

}  // namespace llmplan::executor::fused
