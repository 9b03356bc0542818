// The fused form of block_ops.h: LibTorch autograd functions around the CUDA
// kernels of block_kernels.cu. Compiled only with LLMPLAN_WITH_CUDA; callers
// go through block_ops.h, which checks the preconditions.
#pragma once

#include <cstdint>
#include <tuple>
#include <utility>

#include <ATen/core/Tensor.h>

namespace llmplan::executor::fused {

// REQUIRES: CUDA tensors of one dtype (bf16 or fp32) on one device; shapes as
// block_ops.h states and fitting base/block_kernel_shapes.h.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
std::pair<at::Tensor, at::Tensor> RmsNormOnResidual(const at::Tensor& x, const at::Tensor& weight, double eps);
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up);
std::tuple<at::Tensor, at::Tensor, at::Tensor> QkvRope(const at::Tensor& qkv, const at::Tensor& cos,
                                                       const at::Tensor& sin, int64_t heads, int64_t kv_heads);
at::Tensor SwiGluPacked(const at::Tensor& gate_up);

}  // namespace llmplan::executor::fused
