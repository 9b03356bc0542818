// WidenBf16 (see gradient_widen.h): a grid-stride loop over groups of 8
// elements — one 16-byte load of bf16, two 16-byte stores (and loads, when
// accumulating) of fp32 — and a scalar tail; optionally the sum of squares of
// the result, per block, or (kWrite false) only that sum.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "executor/model/kernel_vectors.cuh"
#include "executor/sharding/gradient_widen.h"

namespace llmplan::executor {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 132 * 8;  // several waves on an H100/H200's 132 SMs; the loop strides the rest

// Each thread handles two groups of 8 per trip round the loop, both loads
// issued before either is used: a streaming kernel needs several requests in
// flight per thread to cover HBM latency at full occupancy. With kSquares,
// the block's sum of the squares of what it wrote goes to partials[block]
// (summed once in registers and shared memory, in a fixed order: the result
// does not depend on timing).
template <bool Accumulate, bool kSquares, bool kWrite = true>
__global__ void __launch_bounds__(kThreads) WidenBf16Kernel(const __nv_bfloat16* __restrict__ in, float* __restrict__ out,
                                                            int64_t n, float* __restrict__ partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t groups = n / 8;
  float squares = 0.f;
  auto widen = [&](const Vec<__nv_bfloat16>& x, int64_t g) {
    Vec<float> lo, hi;
    if constexpr (Accumulate && kWrite) {
      lo = reinterpret_cast<const Vec<float>*>(out)[2 * g];
      hi = reinterpret_cast<const Vec<float>*>(out)[2 * g + 1];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float a = ToFloat(x.v[k]), b = ToFloat(x.v[k + 4]);
      lo.v[k] = Accumulate && kWrite ? lo.v[k] + a : a;
      hi.v[k] = Accumulate && kWrite ? hi.v[k] + b : b;
      if constexpr (kSquares) squares += lo.v[k] * lo.v[k] + hi.v[k] * hi.v[k];
    }
    if constexpr (kWrite) {
      reinterpret_cast<Vec<float>*>(out)[2 * g] = lo;
      reinterpret_cast<Vec<float>*>(out)[2 * g + 1] = hi;
    }
  };
  int64_t g = first;
  for (; g + stride < groups; g += 2 * stride) {
    const Vec<__nv_bfloat16> x0 = reinterpret_cast<const Vec<__nv_bfloat16>*>(in)[g];
    const Vec<__nv_bfloat16> x1 = reinterpret_cast<const Vec<__nv_bfloat16>*>(in)[g + stride];
    widen(x0, g);
    widen(x1, g + stride);
  }
  if (g < groups) widen(reinterpret_cast<const Vec<__nv_bfloat16>*>(in)[g], g);
  for (int64_t i = groups * 8 + first; i < n; i += stride) {
    const float a = ToFloat(in[i]);
    const float v = Accumulate && kWrite ? out[i] + a : a;
    if constexpr (kWrite) out[i] = v;
    if constexpr (kSquares) squares += v * v;
  }
  if constexpr (kSquares) {
    __shared__ float warp_sums[kThreads / 32];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) squares += __shfl_down_sync(0xffffffffu, squares, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = squares;
    __syncthreads();
    if (threadIdx.x == 0) {
      float block = 0.f;
      for (int w = 0; w < kThreads / 32; ++w) block += warp_sums[w];
      partials[blockIdx.x] = block;
    }
  }
}

template <bool Accumulate>
void Launch(const __nv_bfloat16* in, float* out, int64_t n, float* partials, int blocks, cudaStream_t st) {
  if (partials != nullptr) {
    WidenBf16Kernel<Accumulate, true><<<blocks, kThreads, 0, st>>>(in, out, n, partials);
  } else {
    WidenBf16Kernel<Accumulate, false><<<blocks, kThreads, 0, st>>>(in, out, n, nullptr);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

int64_t WidenBf16Partials(int64_t n) {
  const int64_t work = std::max<int64_t>(1, n / 16);  // two groups of 8 per thread
  return std::min<int64_t>((work + kThreads - 1) / kThreads, kMaxBlocks);
}

bool LaunchWidenBf16(const void* in_bf16, float* out, int64_t n, bool accumulate, float* square_partials,
                     void* stream) {
  if (!Aligned16(in_bf16) || (out != nullptr && !Aligned16(out))) return false;
  if (n <= 0 && square_partials == nullptr) return true;
  const int blocks = static_cast<int>(WidenBf16Partials(n));
  const auto* in = static_cast<const __nv_bfloat16*>(in_bf16);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (out == nullptr) {
    if (square_partials == nullptr || accumulate)
      throw std::invalid_argument("LaunchWidenBf16: a pass that writes nothing must sum squares and not accumulate");
    WidenBf16Kernel<false, true, false><<<blocks, kThreads, 0, st>>>(in, nullptr, n, square_partials);
  } else if (accumulate) {
    Launch<true>(in, out, n, square_partials, blocks, st);
  } else {
    Launch<false>(in, out, n, square_partials, blocks, st);
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) throw std::runtime_error(std::string("bf16 widen launch failed: ") + cudaGetErrorString(error));
  return true;
}

}  // namespace llmplan::executor
