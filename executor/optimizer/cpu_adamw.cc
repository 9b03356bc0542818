// CpuAdamW (see cpu_adamw.h).
#if defined(__GNUC__) && !defined(__clang__)
// This file is the offloaded optimizer's inner loop: vectorise it even in a
// build whose default is -O2 (GCC vectorises loops only at -O3 before GCC 12).
#pragma GCC optimize("O3")
#endif

#include "executor/optimizer/cpu_adamw.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace llmplan::executor {
namespace {

// Elements one thread is worth starting for (~1 MB of state touched).
constexpr int64_t kMinPerThread = 1 << 16;

void AdamWChunk(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                const AdamWScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] * s.beta1 + gi * s.one_minus_beta1;
    const float vi = v[i] * s.beta2 + gi * gi * s.one_minus_beta2;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.bias2_sqrt + s.eps;
    p[i] = p[i] * s.decay + s.step_size * (mi / denom);
  }
}

}  // namespace

void CpuAdamW(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWScalars& s,
              int threads) {
  if (n <= 0) return;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t useful = std::max<int64_t>(1, n / kMinPerThread);
  const int count = static_cast<int>(std::min<int64_t>(threads, useful));
  if (count == 1) {
    AdamWChunk(param, grad, exp_avg, exp_avg_sq, n, s);
    return;
  }
  // Chunks rounded to 16 floats (a 64-byte cache line) so neighbours never
  // write the same line.
  const int64_t chunk = ((n + count - 1) / count + 15) / 16 * 16;
  std::vector<std::thread> workers;
  for (int t = 1; t < count; ++t) {
    const int64_t begin = t * chunk;
    if (begin >= n) break;
    const int64_t len = std::min(chunk, n - begin);
    workers.emplace_back(AdamWChunk, param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin, len, s);
  }
  AdamWChunk(param, grad, exp_avg, exp_avg_sq, std::min(chunk, n), s);  // this thread takes chunk 0
  for (auto& w : workers) w.join();
}

}  // namespace llmplan::executor
