// The fused AdamW kernel of the GPU optimizer step (see adamw_math.h): one
// launch per unit shard, one pass over HBM. Per element it reads p, g, m, v
// (16 bytes; 14 with a bf16 gradient, gradient_path.h) and writes p, m, v
// (12 bytes) plus the compute copy the next all-gather sends (2 bytes in
// bf16) — the same pass, so the gather needs no separate cast kernel and no
// second read of the fp32 master.
//
// Grid-stride loop over float4 (16-byte loads and stores, the widest a
// thread issues) when every pointer is 16-byte aligned — flat shards from the
// caching allocator are — with a scalar tail; a scalar kernel otherwise.
// Arithmetic mirrors the ATen form in adamw.cc, so results match it up to
// fp32 rounding (the kernel fuses each a * b + c into one FMA).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "executor/optimizer/adamw_math.h"

namespace llmplan::executor {
namespace {

enum OutKind { kNoOut = 0, kBf16Out = 1, kFp32Out = 2 };

// Every rounding spelled out (the _rn intrinsics are never contracted or
// reordered): left to nvcc, `a * b + c * d` became a different pair of FMA
// and multiply in the fp32-gradient and bf16-gradient instantiations, so
// the same widened gradient gave updates 1 ulp apart on an H200.
__device__ __forceinline__ float Update(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  g = __fmul_rn(g, s.grad_scale);
  m = __fmaf_rn(g, s.one_minus_beta1, __fmul_rn(m, s.beta1));
  v = __fmaf_rn(__fmul_rn(g, g), s.one_minus_beta2, __fmul_rn(v, s.beta2));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias2_sqrt), s.eps);
  p = __fmaf_rn(s.step_size, __fdiv_rn(m, denom), __fmul_rn(p, s.decay));
  return p;
}

template <int Out>
__device__ __forceinline__ void Store1(void* out, int64_t i, float value) {
  if constexpr (Out == kBf16Out) {
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(value);  // round to nearest even, as torch's cast
  } else if constexpr (Out == kFp32Out) {
    static_cast<float*>(out)[i] = value;
  }
}

// Four gradients from element 4i on: a float4, or four bf16 widened (exact).
__device__ __forceinline__ float4 LoadGrad4(const float* grad, int64_t i) { return reinterpret_cast<const float4*>(grad)[i]; }
__device__ __forceinline__ float4 LoadGrad4(const __nv_bfloat16* grad, int64_t i) {
  const uint2 raw = reinterpret_cast<const uint2*>(grad)[i];  // 8 bytes: 4 bf16
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float LoadGrad1(const float* grad, int64_t i) { return grad[i]; }
__device__ __forceinline__ float LoadGrad1(const __nv_bfloat16* grad, int64_t i) { return __bfloat162float(grad[i]); }

template <int Out, bool Vector, typename Grad>
__global__ void FusedAdamWKernel(float* __restrict__ param, const Grad* __restrict__ grad, float* __restrict__ exp_avg,
                                 float* __restrict__ exp_avg_sq, void* __restrict__ out, int64_t n, AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_begin = 0;
  if constexpr (Vector) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) {
      float4 p = reinterpret_cast<float4*>(param)[i];
      const float4 g = LoadGrad4(grad, i);
      float4 m = reinterpret_cast<float4*>(exp_avg)[i];
      float4 v = reinterpret_cast<float4*>(exp_avg_sq)[i];
      Update(p.x, g.x, m.x, v.x, s);
      Update(p.y, g.y, m.y, v.y, s);
      Update(p.z, g.z, m.z, v.z, s);
      Update(p.w, g.w, m.w, v.w, s);
      reinterpret_cast<float4*>(param)[i] = p;
      reinterpret_cast<float4*>(exp_avg)[i] = m;
      reinterpret_cast<float4*>(exp_avg_sq)[i] = v;
      if constexpr (Out == kBf16Out) {
        __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out);
        o[2 * i] = __floats2bfloat162_rn(p.x, p.y);  // .x (low half) = element 4i
        o[2 * i + 1] = __floats2bfloat162_rn(p.z, p.w);
      } else if constexpr (Out == kFp32Out) {
        reinterpret_cast<float4*>(out)[i] = p;
      }
    }
    scalar_begin = n4 * 4;
  }
  for (int64_t i = scalar_begin + first; i < n; i += stride) {
    float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    Update(p, LoadGrad1(grad, i), m, v, s);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    Store1<Out>(out, i, p);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <int Out, typename Grad>
void Launch(float* param, const Grad* grad, float* exp_avg, float* exp_avg_sq, void* out, int64_t n,
            const AdamWScalars& s, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Enough blocks to fill every SM several times over (132 SMs on H100/H200);
  // the grid-stride loop covers the rest without a launch per chunk.
  constexpr int64_t kMaxBlocks = 132 * 8;
  const bool grad_aligned = reinterpret_cast<std::uintptr_t>(grad) % (4 * sizeof(Grad)) == 0;
  const bool vector = Aligned16(param) && grad_aligned && Aligned16(exp_avg) && Aligned16(exp_avg_sq) &&
                      (Out == kNoOut || (Out == kBf16Out ? reinterpret_cast<std::uintptr_t>(out) % 8 == 0
                                                         : Aligned16(out)));
  const int64_t work = vector ? (n + 3) / 4 : n;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, kMaxBlocks)));
  if (vector) {
    FusedAdamWKernel<Out, true, Grad><<<blocks, kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, out, n, s);
  } else {
    FusedAdamWKernel<Out, false, Grad><<<blocks, kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, out, n, s);
  }
}

template <typename Grad>
void LaunchFor(float* param, const Grad* grad, float* exp_avg, float* exp_avg_sq, void* compute_out,
               bool compute_is_bf16, int64_t n, const AdamWScalars& s, cudaStream_t st) {
  if (compute_out == nullptr) {
    Launch<kNoOut>(param, grad, exp_avg, exp_avg_sq, nullptr, n, s, st);
  } else if (compute_is_bf16) {
    Launch<kBf16Out>(param, grad, exp_avg, exp_avg_sq, compute_out, n, s, st);
  } else {
    Launch<kFp32Out>(param, grad, exp_avg, exp_avg_sq, compute_out, n, s, st);
  }
}

}  // namespace

void LaunchFusedAdamW(float* param, const void* grad, bool grad_is_bf16, float* exp_avg, float* exp_avg_sq,
                      void* compute_out, bool compute_is_bf16, int64_t n, const AdamWScalars& s, void* stream) {
  if (n <= 0) return;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (grad_is_bf16) {
    LaunchFor(param, static_cast<const __nv_bfloat16*>(grad), exp_avg, exp_avg_sq, compute_out, compute_is_bf16, n, s,
              st);
  } else {
    LaunchFor(param, static_cast<const float*>(grad), exp_avg, exp_avg_sq, compute_out, compute_is_bf16, n, s, st);
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) throw std::runtime_error(std::string("fused AdamW launch failed: ") + cudaGetErrorString(error));
}

}  // namespace llmplan::executor
