// Block ops (see block_ops.h): the composite form and the choice of form.
#include "executor/model/block_ops.h"

#include "base/block_kernel_shapes.h"
#include "executor/torch_compat.h"

#ifdef LLMPLAN_WITH_CUDA
#include "executor/model/block_ops_cuda.h"
#endif

namespace llmplan::executor {

bool BlockKernelsBuilt() {
#ifdef LLMPLAN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

BlockOpsForm BlockOpsFormFor(bool requested, const at::Tensor& x, int64_t hidden, int64_t head_dim) {
  const auto dtype = x.scalar_type();
  const bool fits = (dtype == at::kBFloat16 || dtype == at::kFloat) &&
                    BlockKernelsFit(static_cast<int>(x.element_size()), hidden, head_dim);
  return requested && x.is_cuda() && fits && BlockKernelsBuilt() ? BlockOpsForm::kFused : BlockOpsForm::kComposite;
}

namespace {

at::Tensor CompositeRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // fp32 statistics whatever the compute dtype (bf16 mean-of-squares loses
  // too much), as HF's LlamaRMSNorm; fp64 stays fp64 (the exactness tests).
  at::Tensor xf = x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
  at::Tensor inv_rms = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * (xf * inv_rms).to(x.scalar_type());
}

// HF rotate_half: (x1, x2) -> (-x2, x1) over the two halves of the last dim.
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor CompositeRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // [T, D] -> [T, 1, D]: broadcasts over the batch and the heads of [B, T, H, D].
  const at::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  return x * c + RotateHalf(x) * s;
}

}  // namespace

at::Tensor RmsNorm(BlockOpsForm form, const at::Tensor& x, const at::Tensor& weight, double eps) {
#ifdef LLMPLAN_WITH_CUDA
  if (form == BlockOpsForm::kFused) return fused::RmsNorm(x, weight, eps);
#endif
  (void)form;
  return CompositeRmsNorm(x, weight, eps);
}

std::pair<at::Tensor, at::Tensor> RmsNormOnResidual(BlockOpsForm form, const at::Tensor& x, const at::Tensor& weight,
                                                    double eps) {
#ifdef LLMPLAN_WITH_CUDA
  if (form == BlockOpsForm::kFused) return fused::RmsNormOnResidual(x, weight, eps);
#endif
  (void)form;
  return {CompositeRmsNorm(x, weight, eps), x};
}

at::Tensor ApplyRope(BlockOpsForm form, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
#ifdef LLMPLAN_WITH_CUDA
  if (form == BlockOpsForm::kFused) return fused::ApplyRope(x, cos, sin);
#endif
  (void)form;
  return CompositeRope(x, cos, sin);
}

at::Tensor SwiGlu(BlockOpsForm form, const at::Tensor& gate, const at::Tensor& up) {
#ifdef LLMPLAN_WITH_CUDA
  if (form == BlockOpsForm::kFused) return fused::SwiGlu(gate, up);
#endif
  (void)form;
  return at::silu(gate) * up;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> QkvRope(const at::Tensor& qkv, const at::Tensor& cos,
                                                       const at::Tensor& sin, int64_t heads, int64_t kv_heads) {
#ifdef LLMPLAN_WITH_CUDA
  return fused::QkvRope(qkv, cos, sin, heads, kv_heads);
#else
  (void)qkv, (void)cos, (void)sin, (void)heads, (void)kv_heads;
  TORCH_CHECK(false, "QkvRope is a fused kernel: this executor was built without CUDA");
#endif
}

at::Tensor SwiGluPacked(const at::Tensor& gate_up) {
#ifdef LLMPLAN_WITH_CUDA
  return fused::SwiGluPacked(gate_up);
#else
  (void)gate_up;
  TORCH_CHECK(false, "SwiGluPacked is a fused kernel: this executor was built without CUDA");
#endif
}

}  // namespace llmplan::executor
