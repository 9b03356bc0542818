// ResidualGemm: residual + x W^T as one cuBLASLt matmul that reads the
// residual as its C operand and writes a new tensor as D. Compiled only with
// LLMPLAN_WITH_CUDA; AddProjection (projections.h) is the caller.
//
// Why not at::addmm: cuBLAS's classic API computes C = A B + beta C in place,
// so ATen first copies the residual into the output and then runs the GEMM
// on it — a [tokens, hidden] read and write before every o and down
// projection (64 MiB each way per projection of a Llama-3.2-1B micro-batch
// of 16,384 tokens, ~31 us on an H200, 32 a step). cuBLASLt takes C and D as
// separate matrices: the epilogue reads the residual tile by tile while it
// writes the sum, and the copy disappears. The residual is still needed
// after (the block's RMSNorm saved it), so adding in place is not an option.
#pragma once

#include <ATen/core/Tensor.h>

namespace llmplan::executor::fused {

// residual [rows, out] + x [rows, in] weight [out, in]^T, rounded once from
// fp32 accumulation, as a new [rows, out] tensor; an undefined tensor where
// cuBLASLt offers no algorithm for these shapes and alignments (the caller
// falls back to at::addmm). The matmul runs on the current stream with ATen's
// cuBLASLt handle and that stream's cuBLASLt workspace (taken at its first
// call, kept after: the profile's workspace_bytes), so it is captured into a
// CUDA graph as any ATen GEMM is and allocates nothing but its output.
// REQUIRES: contiguous CUDA tensors on the current device, one dtype (bf16
// or fp16).
at::Tensor ResidualGemm(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight);

}  // namespace llmplan::executor::fused
