// The cross-entropy's softmax (see cross_entropy_kernel.h): one thread block
// per row of logits. Pass 1 keeps a running (max, sum of exp) per thread —
// the online softmax, so the row is read once to get its log-sum-exp — and
// merges them across the block; pass 2 reads the row again (mostly from L2:
// a 128k-vocabulary bf16 row is 250 KiB) and writes the gradient in place.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "executor/model/cross_entropy_kernel.h"
#include "executor/model/kernel_vectors.cuh"

namespace llmplan::executor {
namespace {

// A running log-sum-exp: sum of exp(x - max) over the values seen.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.f;
};

__device__ __forceinline__ MaxSum Merge(MaxSum a, MaxSum b) {
  if (b.max == -INFINITY) return a;  // b saw nothing (or only -inf)
  if (a.max == -INFINITY) return b;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// Merges every thread's MaxSum; every thread gets the same result.
// REQUIRES: blockDim.x a multiple of 32.
__device__ MaxSum BlockMerge(MaxSum v) {
  __shared__ float maxes[32], sums[32];
  for (int offset = 16; offset > 0; offset /= 2) {
    MaxSum other;
    other.max = __shfl_xor_sync(0xffffffffu, v.max, offset);
    other.sum = __shfl_xor_sync(0xffffffffu, v.sum, offset);
    v = Merge(v, other);
  }
  if (threadIdx.x % 32 == 0) {
    maxes[threadIdx.x / 32] = v.max;
    sums[threadIdx.x / 32] = v.sum;
  }
  __syncthreads();
  MaxSum total;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total = Merge(total, MaxSum{maxes[w], sums[w]});
  return total;
}

template <typename T, bool kVector, bool kGradient>
__global__ void __launch_bounds__(1024) CrossEntropyRowKernel(T* __restrict__ logits, const int64_t* __restrict__ targets,
                                                              float* __restrict__ row_loss, int64_t vocab,
                                                              float grad_scale) {
  constexpr int kN = Vec<T>::kN;
  T* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const int64_t target = targets[blockIdx.x];

  // Pass 1: this thread's (max, sum of exp), one vector at a time: the
  // vector's max first, so each element costs one exp.
  MaxSum mine;
  if constexpr (kVector) {
    for (int64_t v = threadIdx.x; v < vocab / kN; v += blockDim.x) {
      const Vec<T> in = reinterpret_cast<const Vec<T>*>(x)[v];
      float values[kN], m = mine.max;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        values[j] = ToFloat(in.v[j]);
        m = fmaxf(m, values[j]);
      }
      float s = mine.max == -INFINITY ? 0.f : mine.sum * expf(mine.max - m);
#pragma unroll
      for (int j = 0; j < kN; ++j) s += expf(values[j] - m);
      mine = {m, s};
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) mine = Merge(mine, MaxSum{ToFloat(x[i]), 1.f});
  }
  const MaxSum row = BlockMerge(mine);
  const float lse = row.max + logf(row.sum);
  if (threadIdx.x == 0) row_loss[blockIdx.x] = lse - ToFloat(x[target]);
  if constexpr (!kGradient) return;

  // Everyone has read x[target] before anyone overwrites it.
  __syncthreads();
  // Pass 2: the gradient in place.
  if constexpr (kVector) {
    for (int64_t v = threadIdx.x; v < vocab / kN; v += blockDim.x) {
      Vec<T> io = reinterpret_cast<Vec<T>*>(x)[v];
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float one_hot = v * kN + j == target ? 1.f : 0.f;
        io.v[j] = FromFloat<T>((expf(ToFloat(io.v[j]) - lse) - one_hot) * grad_scale);
      }
      reinterpret_cast<Vec<T>*>(x)[v] = io;
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float one_hot = i == target ? 1.f : 0.f;
      x[i] = FromFloat<T>((expf(ToFloat(x[i]) - lse) - one_hot) * grad_scale);
    }
  }
}

template <typename T, bool kGradient>
void Launch(void* logits, const int64_t* targets, float* row_loss, int64_t rows, int64_t vocab, float grad_scale,
            cudaStream_t stream) {
  // 16-byte vectors when every row starts on a 16-byte boundary (the GEMM's
  // output buffer does; a row of vocab elements keeps it when vocab is a
  // whole number of vectors — 128256, 151936 and 32000 all are).
  const bool vector = vocab % Vec<T>::kN == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  // 1024 threads: a 128k row is ~16 vectors per thread, enough loads in
  // flight per SM with two blocks resident.
  const int threads = 1024;
  auto* x = static_cast<T*>(logits);
  if (vector) {
    CrossEntropyRowKernel<T, true, kGradient><<<rows, threads, 0, stream>>>(x, targets, row_loss, vocab, grad_scale);
  } else {
    CrossEntropyRowKernel<T, false, kGradient><<<rows, threads, 0, stream>>>(x, targets, row_loss, vocab, grad_scale);
  }
}

}  // namespace

void LaunchCrossEntropyRows(KernelDType dtype, void* logits, const int64_t* targets, float* row_loss, int64_t rows,
                            int64_t vocab, bool write_gradient, float grad_scale, void* stream) {
  if (rows <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == KernelDType::kBF16) {
    if (write_gradient) {
      Launch<__nv_bfloat16, true>(logits, targets, row_loss, rows, vocab, grad_scale, st);
    } else {
      Launch<__nv_bfloat16, false>(logits, targets, row_loss, rows, vocab, grad_scale, st);
    }
  } else {
    if (write_gradient) {
      Launch<float, true>(logits, targets, row_loss, rows, vocab, grad_scale, st);
    } else {
      Launch<float, false>(logits, targets, row_loss, rows, vocab, grad_scale, st);
    }
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    throw std::runtime_error(std::string("cross-entropy kernel launch failed: ") + cudaGetErrorString(error));
}

}  // namespace llmplan::executor
