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

// Updates param, exp_avg, exp_avg_sq in place from grad (n elements each).
// `threads` <= 0 picks the machine's hardware threads (fewer for small n, so
// a tiny shard is not paid for with thread start-up).
// REQUIRES: the four arrays hold n floats and do not overlap.
void CpuAdamW(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWScalars& s,
              int threads = 0);

}  // namespace llmplan::executor
