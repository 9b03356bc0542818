// CpuAdamW (see cpu_adamw.h).
#if defined(__GNUC__) && !defined(__clang__)
// This file is the offloaded optimizer's inner loop: vectorise it even in a
// build whose default is -O2 (GCC vectorises loops only at -O3 before GCC 12).
// It is also compiled with -fno-math-errno (executor/CMakeLists.txt; the
// pragma cannot set it): with errno semantics std::sqrt must stay a call per
// element, for a negative input that v, a sum of squares, never holds, and
// GCC then vectorises nothing.
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

enum class ComputeOut { kNone, kBf16, kFp32 };

// One template per output kind, so the innermost loop has no branch on it
// and vectorises the same way for each.
template <ComputeOut kOut>
void AdamWChunk(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                void* __restrict out, int64_t n, const AdamWScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * s.grad_scale;
    const float mi = m[i] * s.beta1 + gi * s.one_minus_beta1;
    const float vi = v[i] * s.beta2 + gi * gi * s.one_minus_beta2;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.bias2_sqrt + s.eps;
    const float pi = p[i] * s.decay + s.step_size * (mi / denom);
    p[i] = pi;
    if constexpr (kOut == ComputeOut::kBf16) static_cast<uint16_t*>(out)[i] = FloatToBf16Bits(pi);
    if constexpr (kOut == ComputeOut::kFp32) static_cast<float*>(out)[i] = pi;
  }
}

void AdamWRange(ComputeOut kind, float* p, const float* g, float* m, float* v, void* out, int64_t begin, int64_t n,
                const AdamWScalars& s) {
  switch (kind) {
    case ComputeOut::kNone: AdamWChunk<ComputeOut::kNone>(p + begin, g + begin, m + begin, v + begin, nullptr, n, s); break;
    case ComputeOut::kBf16:
      AdamWChunk<ComputeOut::kBf16>(p + begin, g + begin, m + begin, v + begin, static_cast<uint16_t*>(out) + begin, n, s);
      break;
    case ComputeOut::kFp32:
      AdamWChunk<ComputeOut::kFp32>(p + begin, g + begin, m + begin, v + begin, static_cast<float*>(out) + begin, n, s);
      break;
  }
}

}  // namespace

void CpuAdamW(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWScalars& s,
              int threads, void* compute_out, bool compute_is_bf16) {
  if (n <= 0) return;
  const ComputeOut kind =
      compute_out == nullptr ? ComputeOut::kNone : (compute_is_bf16 ? ComputeOut::kBf16 : ComputeOut::kFp32);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t useful = std::max<int64_t>(1, n / kMinPerThread);
  const int count = static_cast<int>(std::min<int64_t>(threads, useful));
  if (count == 1) {
    AdamWRange(kind, param, grad, exp_avg, exp_avg_sq, compute_out, 0, n, s);
    return;
  }
  // Chunks rounded to 32 elements (a 64-byte cache line of bf16, two of
  // fp32) so neighbours never write the same line.
  const int64_t chunk = ((n + count - 1) / count + 31) / 32 * 32;
  std::vector<std::thread> workers;
  for (int t = 1; t < count; ++t) {
    const int64_t begin = t * chunk;
    if (begin >= n) break;
    const int64_t len = std::min(chunk, n - begin);
    workers.emplace_back(AdamWRange, kind, param, grad, exp_avg, exp_avg_sq, compute_out, begin, len, s);
  }
  AdamWRange(kind, param, grad, exp_avg, exp_avg_sq, compute_out, 0, std::min(chunk, n), s);  // chunk 0 here
  for (auto& w : workers) w.join();
}

}  // namespace llmplan::executor
