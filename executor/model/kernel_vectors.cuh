// Device helpers shared by the fused kernels (block_kernels.cu,
// cross_entropy_kernel.cu): a 16-byte vector of elements — the widest load one
// thread issues, so a warp moves whole 512-byte lines — and conversions
// between the element type and the fp32 the kernels compute in. CUDA only.
#pragma once

#include <cuda_bf16.h>

namespace llmplan::executor {

// 8 bf16 or 4 fp32 elements, loaded and stored as one 16-byte transaction.
template <typename T>
struct alignas(16) Vec {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

// Round to nearest even, as LibTorch's casts.
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// x rounded to T's precision, kept in fp32: where a composite LibTorch op
// would have stored an intermediate tensor of type T.
template <typename T>
__device__ __forceinline__ float Round(float x) { return ToFloat(FromFloat<T>(x)); }

}  // namespace llmplan::executor
