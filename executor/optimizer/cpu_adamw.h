// CpuAdamW: the AdamW update of an offloaded shard on the host — fp32 master,
// m and v in (pinned) host memory, the gradient shard copied down from the
// GPU. One pass over the four arrays, split over std::threads in contiguous
// chunks (each chunk streams through its own cache lines; no false sharing
// but at chunk edges) with a plain loop the compiler vectorises (-O3: AVX2 /
// AVX-512 on x86). The arithmetic is adamw_math.h's, the same as the GPU path.
#pragma once

#include <cstdint>

#include "executor/optimizer/adamw_math.h"

namespace llmplan::executor {

// Updates param, exp_avg, exp_avg_sq in place from grad (n elements each)
// and, when compute_out is not null, writes the updated param there as bf16
// (compute_is_bf16, rounded to nearest even as LibTorch's cast) or
// fp32: the copy that goes up to the GPU. Writing it in the same pass saves a
// second sweep over the master (4 bytes read + 2 written per element on top
// of the update's 28): the loop is bound by host memory bandwidth.
// `threads` <= 0 picks the machine's hardware threads (fewer for small n, so
// a tiny shard is not paid for with thread start-up).
// REQUIRES: the arrays hold n elements and do not overlap.
void CpuAdamW(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWScalars& s,
              int threads = 0, void* compute_out = nullptr, bool compute_is_bf16 = true);

// fp32 -> bf16 bits, round to nearest even as LibTorch casts; a NaN becomes
// the quiet NaN 0x7FC0 (LibTorch's vectorised cast keeps other NaN bits).
inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
}

}  // namespace llmplan::executor
