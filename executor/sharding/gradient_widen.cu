// WidenBf16 (see gradient_widen.h): a grid-stride loop over groups of 8
// elements — one 16-byte load of bf16, two 16-byte stores (and loads, when
// accumulating) of fp32 — and a scalar tail.
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

template <bool Accumulate>
__global__ void WidenBf16Kernel(const __nv_bfloat16* __restrict__ in, float* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t groups = n / 8;
  for (int64_t g = first; g < groups; g += stride) {
    const Vec<__nv_bfloat16> x = reinterpret_cast<const Vec<__nv_bfloat16>*>(in)[g];
    Vec<float> lo, hi;
    if constexpr (Accumulate) {
      lo = reinterpret_cast<const Vec<float>*>(out)[2 * g];
      hi = reinterpret_cast<const Vec<float>*>(out)[2 * g + 1];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float a = ToFloat(x.v[k]), b = ToFloat(x.v[k + 4]);
      lo.v[k] = Accumulate ? lo.v[k] + a : a;
      hi.v[k] = Accumulate ? hi.v[k] + b : b;
    }
    reinterpret_cast<Vec<float>*>(out)[2 * g] = lo;
    reinterpret_cast<Vec<float>*>(out)[2 * g + 1] = hi;
  }
  for (int64_t i = groups * 8 + first; i < n; i += stride) {
    const float a = ToFloat(in[i]);
    out[i] = Accumulate ? out[i] + a : a;
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool LaunchWidenBf16(const void* in_bf16, float* out, int64_t n, bool accumulate, void* stream) {
  if (!Aligned16(in_bf16) || !Aligned16(out)) return false;
  if (n <= 0) return true;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 132 * 8;  // several waves on an H100/H200's 132 SMs; the loop strides the rest
  const int64_t work = std::max<int64_t>(1, n / 8);
  const int blocks = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, kMaxBlocks));
  const auto* in = static_cast<const __nv_bfloat16*>(in_bf16);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (accumulate) {
    WidenBf16Kernel<true><<<blocks, kThreads, 0, st>>>(in, out, n);
  } else {
    WidenBf16Kernel<false><<<blocks, kThreads, 0, st>>>(in, out, n);
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) throw std::runtime_error(std::string("bf16 widen launch failed: ") + cudaGetErrorString(error));
  return true;
}

}  // namespace llmplan::executor
