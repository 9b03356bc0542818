// Block kernels: the memory-bound parts of a Llama block — RMSNorm, RoPE,
// SwiGLU — each as one CUDA kernel for the forward and one for the backward
// (block_kernels.cu), where LibTorch's composite form runs 4–9 kernels and
// keeps fp32 copies alive for autograd.
//
// Why: on H200 these ops move bytes, not FLOPs. The composite RMSNorm reads and
// writes about 36 bytes per bf16 element (casts to fp32 and back, pow, mean,
// two products); the fused kernel reads x and writes the output once (4 bytes)
// and saves one fp32 number per row for the backward instead of an fp32 copy
// of x and the bf16 normalised tensor. RoPE drops from ~10 passes to 2, SwiGLU
// from 5 to 3 and saves its input pair instead of four tensors.
//
// Numerics: the forward kernels round to the element type exactly where the
// composite form (fused_block_ops.cc) rounds, so their outputs match it
// bit-for-bit up to the order of the RMSNorm's row sum. The backward kernels
// compute in fp32 and round once, so their gradients are at least as accurate
// as the composite's.
//
// Free of LibTorch headers: included by host code and by nvcc. Every launch is
// asynchronous on `stream` (a cudaStream_t) and throws std::runtime_error when
// the launch itself fails.
#pragma once

#include <cstdint>

namespace llmplan::executor {

enum class KernelDType { kBF16, kFP32 };

// RMSNorm forward over `rows` rows of `cols`: inv_rms[r] = rsqrt(mean(x^2) + eps)
// in fp32, normed = round(x * inv_rms), out = round(weight * normed).
// REQUIRES: RmsNormKernelFits (base/block_kernel_shapes.h); x and out contiguous [rows, cols] and
// 16-byte aligned; weight [cols] (any alignment); inv_rms [rows] fp32.
void LaunchRmsNormForward(KernelDType dtype, const void* x, const void* weight, void* out, float* inv_rms,
                          int64_t rows, int64_t cols, float eps, void* stream);

// How many rows of fp32 partial weight gradients LaunchRmsNormBackward writes
// for `rows` rows (the caller sums them).
int64_t RmsNormBackwardPartials(int64_t rows);

// RMSNorm backward: grad_x = round(inv * gn - x * inv^3 * sum(gn * x) / cols)
// with gn = round(grad_out * weight) as the composite form rounds it, and
// grad_weight_partials[p, c] = the fp32 sum of grad_out * normed over the rows
// block p handled. With residual_grad (else null) the kernel also adds the
// gradient x gets from the residual stream: grad_x = round(that + residual_grad),
// the bits autograd's separate add of the two would give, without its pass
// (read two tensors, write one) over the residual stream.
// REQUIRES: as the forward; grad_out, grad_x and residual_grad contiguous
// [rows, cols] and 16-byte aligned; grad_weight_partials
// [RmsNormBackwardPartials(rows), cols].
void LaunchRmsNormBackward(KernelDType dtype, const void* grad_out, const void* x, const void* weight,
                           const float* inv_rms, const void* residual_grad, void* grad_x,
                           float* grad_weight_partials, int64_t rows, int64_t cols, void* stream);

// out[c] = sum over r of partials[r, c] (fp32, in a fixed order), rounded to
// out_dtype: the weight gradient from LaunchRmsNormBackward's partials,
// without ATen's reduction and its staging buffer.
// REQUIRES: partials contiguous fp32 [rows, cols]; out [cols] of out_dtype.
void LaunchSumPartialRows(KernelDType out_dtype, const float* partials, int64_t rows, int64_t cols, void* out,
                          void* stream);

// Rotary embedding in the rotate-half layout over x [tokens, heads, head_dim]
// (tokens = batch * seq, token n at position n % seq), cos and sin
// [>= seq, head_dim]: out = x * cos + rotate_half(x) * sin,
// rotate_half(x) = (-x2, x1). Backward (x, out -> grad_out, grad_x) is the
// transpose: grad_x1 = g1 * cos1 + g2 * sin2, grad_x2 = g2 * cos2 - g1 * sin1.
// Consecutive tokens lie in_token_stride elements apart in the input and
// out_token_stride in the output (heads * head_dim when contiguous): the
// rotated heads of a packed q/k/v projection are read, and their gradients
// written, in place within its rows.
// REQUIRES: RopeKernelFits (base/block_kernel_shapes.h); every pointer 16-byte
// aligned; both strides multiples of head_dim and >= heads * head_dim.
void LaunchRopeForward(KernelDType dtype, const void* x, const void* cos, const void* sin, void* out,
                       int64_t tokens, int64_t seq, int64_t heads, int64_t head_dim, int64_t in_token_stride,
                       int64_t out_token_stride, void* stream);
void LaunchRopeBackward(KernelDType dtype, const void* grad_out, const void* cos, const void* sin, void* grad_x,
                        int64_t tokens, int64_t seq, int64_t heads, int64_t head_dim, int64_t in_token_stride,
                        int64_t out_token_stride, void* stream);

// Copies `rows` rows of row_bytes each from src to dst, rows src_stride_bytes
// and dst_stride_bytes apart (v out of a packed q/k/v projection's rows, and
// its gradient back in).
// REQUIRES: both pointers, both strides and row_bytes multiples of 16 (true
// of a packed q/k/v where RopeKernelFits); the two ranges do not overlap.
void LaunchCopyRows(const void* src, int64_t src_stride_bytes, void* dst, int64_t dst_stride_bytes, int64_t rows,
                    int64_t row_bytes, void* stream);

// SwiGLU: out = round(round(silu(gate)) * up) over `rows` rows of `cols`
// elements; backward gives grad_gate = round(round(g * up) * silu'(gate)) and
// grad_up = round(g * silu(gate)). gate and up (and, backward, their
// gradients) have rows `pair_stride` elements apart: cols for two separate
// tensors, 2 * cols for the halves of one packed gate/up projection
// [rows, 2 * cols] (gate the first half, up the second); out and grad_out
// are contiguous [rows, cols].
// REQUIRES: pair_stride >= cols. Any alignment: the kernel falls back to
// scalar loads when a pointer, cols or pair_stride is not whole 16-byte
// vectors.
void LaunchSwiGluForward(KernelDType dtype, const void* gate, const void* up, void* out, int64_t rows, int64_t cols,
                         int64_t pair_stride, void* stream);
void LaunchSwiGluBackward(KernelDType dtype, const void* grad_out, const void* gate, const void* up,
                          void* grad_gate, void* grad_up, int64_t rows, int64_t cols, int64_t pair_stride,
                          void* stream);

}  // namespace llmplan::executor
