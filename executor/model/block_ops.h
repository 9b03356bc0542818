// Block ops: the memory-bound operations of a Llama block — RMSNorm, RoPE,
// SwiGLU — as LlamaModel calls them. Each has two implementations with the
// same numerics (see block_kernels.h):
//   - the fused CUDA kernels with their own autograd backward, used for CUDA
//     tensors when the executor is built with CUDA, the model's shapes fit
//     (base/block_kernel_shapes.h) and the plan asks for them
//     (Plan::fused_kernels, the default);
//   - the composite form: LibTorch ops, any device, autograd as LibTorch does it
//     (HF LlamaForCausalLM's exact statements). CPU runs use it.
// The planner's memory and work models follow the same rule
// (ActivationShape::fused_kernels).
#pragma once

#include <cstdint>
#include <tuple>
#include <utility>

#include <ATen/core/Tensor.h>

namespace llmplan::executor {

// Whether this executor has the fused kernels: built with CUDA.
bool BlockKernelsBuilt();

// How a block's ops run; LlamaModel decides once per block call (all three
// fused or none, as the planner assumes) with BlockOpsFormFor.
enum class BlockOpsForm { kComposite, kFused };

// kFused when `requested`, `x` is a CUDA tensor, BlockKernelsBuilt() and the
// shapes fit (BlockKernelsFit for x's element size); kComposite otherwise.
BlockOpsForm BlockOpsFormFor(bool requested, const at::Tensor& x, int64_t hidden, int64_t head_dim);

// HF LlamaRMSNorm: weight * (xf * rsqrt(mean(xf^2, -1) + eps)).to(dtype),
// xf = x.to(fp32). x [..., cols], weight [cols] in x's dtype.
at::Tensor RmsNorm(BlockOpsForm form, const at::Tensor& x, const at::Tensor& weight, double eps);

// RmsNorm of x on the residual stream: {RmsNorm(x), r}, where r is x itself
// (the same values and storage) for the caller's residual add, which uses r
// in place of x. Fused form: autograd then delivers both of x's gradients —
// the norm's and the residual stream's — to one backward, whose kernel adds
// them (block_kernels.h) instead of autograd summing them in a separate add
// pass over [tokens, hidden] afterwards: two passes fewer per block, the
// same bits. Composite form: {RmsNorm(x), x}, autograd sums as HF's does.
std::pair<at::Tensor, at::Tensor> RmsNormOnResidual(BlockOpsForm form, const at::Tensor& x, const at::Tensor& weight,
                                                    double eps);

// Rotary embedding, rotate-half layout, on x [B, T, heads, head_dim] (the
// projection's output viewed per head, before the transpose to [B, H, T, D]);
// cos and sin [T, head_dim] in x's dtype. Returns [B, T, heads, head_dim].
at::Tensor ApplyRope(BlockOpsForm form, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// silu(gate) * up, gate and up of one shape and dtype.
at::Tensor SwiGlu(BlockOpsForm form, const at::Tensor& gate, const at::Tensor& up);

// The fused form's ops on packed projections (projections.h): a block's q,
// k and v come out of one GEMM, its gate and up out of another.
//
// QkvRope: qkv [B, T, (heads + 2 * kv_heads) * D] (q's heads, then k's, then
// v's) -> {q, k rotated by RoPE, v}, each [B, T, its heads, D] and
// contiguous; cos and sin [T, D] in qkv's dtype. The packed input is not kept
// for backward; its gradient comes back packed.
// SwiGluPacked: gate_up [..., 2 * inter] (gate, then up) -> silu(gate) * up
// [..., inter]; keeps gate_up for backward and returns its gradient packed.
// REQUIRES: BlockKernelsBuilt() and CUDA tensors that BlockOpsFormFor
// accepts (the composite form computes separate projections instead).
std::tuple<at::Tensor, at::Tensor, at::Tensor> QkvRope(const at::Tensor& qkv, const at::Tensor& cos,
                                                       const at::Tensor& sin, int64_t heads, int64_t kv_heads);
at::Tensor SwiGluPacked(const at::Tensor& gate_up);

}  // namespace llmplan::executor
