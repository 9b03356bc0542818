// Which models the executor's fused block kernels (executor/model/block_kernels.cu:
// RMSNorm, RoPE, SwiGLU) run on, stated once for the two sides that must agree:
// the executor, which uses them on a GPU when the model fits, and the planner's
// memory and work models, which then count the kernels' bytes and saved tensors
// instead of LibTorch's composite ops.
//
// The kernels move 16-byte vectors, so a norm's row and each half of a head must
// be whole vectors; a norm's row lives in one thread block's registers (at most
// 1,024 threads x 2 vectors). Every released Llama, Mistral and Qwen2 shape fits.
// Free of LibTorch and CUDA headers: included by nvcc too.
#pragma once

#include <cstdint>

namespace llmplan {

constexpr int64_t kBlockKernelMaxRowVectors = 1024 * 2;

// Rows of fp32 partial weight gradients the RMSNorm backward writes at most
// (one per thread block: 8 blocks per SM of a 132-SM H100/H200 keep enough
// rows in flight to saturate HBM; the sum of the partials reads 4 bytes x
// 1,056 rows x cols, a few microseconds).
constexpr int64_t kRmsNormBackwardMaxPartials = 132 * 8;

// element_bytes: 2 (bf16) or 4 (fp32).
constexpr bool RmsNormKernelFits(int element_bytes, int64_t cols) {
  const int64_t per_vector = 16 / element_bytes;
  return cols > 0 && cols % per_vector == 0 && cols / per_vector <= kBlockKernelMaxRowVectors;
}
constexpr bool RopeKernelFits(int element_bytes, int64_t head_dim) {
  const int64_t per_vector = 16 / element_bytes;
  return head_dim > 0 && head_dim % (2 * per_vector) == 0;
}
// The whole block: both norms (hidden) and RoPE (head_dim). SwiGLU takes any shape.
constexpr bool BlockKernelsFit(int element_bytes, int64_t hidden, int64_t head_dim) {
  return (element_bytes == 2 || element_bytes == 4) && RmsNormKernelFits(element_bytes, hidden) &&
         RopeKernelFits(element_bytes, head_dim);
}

}  // namespace llmplan
