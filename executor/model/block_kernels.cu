// Block kernels (see block_kernels.h): RMSNorm, RoPE and SwiGLU, forward and
// backward, one launch each.
//
// Every kernel moves 16-byte vectors (8 bf16 or 4 fp32 elements: the widest
// load one thread issues, so a warp touches whole 512-byte lines) and does its
// arithmetic in fp32. Rounding to the element type happens where LibTorch's
// composite form rounds (Round(), kernel_vectors.cuh), which keeps the forward outputs equal
// to the composite's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <stdexcept>
#include <string>

#include "executor/model/block_kernels.h"

#include "base/block_kernel_shapes.h"
#include "executor/model/kernel_vectors.cuh"

namespace llmplan::executor {
namespace {

// Sum of v over the thread block, returned to every thread in the same order,
// so all threads agree bit-for-bit. REQUIRES: blockDim.x a multiple of 32.
// Safe to call repeatedly in a loop: it waits for the previous call's readers
// before reusing its shared buffer.
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_sums[w];
  return total;
}

constexpr int kMaxRowThreads = 1024;
constexpr int kMaxVectorsPerThread = 2;
static_assert(kMaxRowThreads * kMaxVectorsPerThread == kBlockKernelMaxRowVectors,
              "base/block_kernel_shapes.h states this limit to the planner");

// ---------------------------------------------------------------------------
// RMSNorm. One thread block per row (forward) or per group of rows
// (backward); each thread holds kPer vectors of its row in registers, so x is
// read from HBM once.

template <typename T, int kPer>
__global__ void __launch_bounds__(kMaxRowThreads) RmsNormForwardKernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out,
                                     float* __restrict__ inv_rms, int64_t cols, float eps) {
  constexpr int kN = Vec<T>::kN;
  const int64_t row = blockIdx.x;
  const int vectors = static_cast<int>(cols / kN);
  const Vec<T>* xr = reinterpret_cast<const Vec<T>*>(x + row * cols);
  Vec<T>* outr = reinterpret_cast<Vec<T>*>(out + row * cols);
  float xv[kPer][kN];
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int vi = k * blockDim.x + threadIdx.x;
    if (vi < vectors) {
      const Vec<T> v = xr[vi];
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        xv[k][j] = ToFloat(v.v[j]);
        sum += xv[k][j] * xv[k][j];
      }
    }
  }
  sum = BlockSum(sum);
  const float inv = rsqrtf(sum / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) inv_rms[row] = inv;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int vi = k * blockDim.x + threadIdx.x;
    if (vi < vectors) {
      Vec<T> o;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float normed = Round<T>(xv[k][j] * inv);  // (xf * inv_rms).to(dtype)
        o.v[j] = FromFloat<T>(ToFloat(weight[vi * kN + j]) * normed);
      }
      outr[vi] = o;
    }
  }
}

template <typename T, int kPer, bool kResidual>
__global__ void __launch_bounds__(kMaxRowThreads) RmsNormBackwardKernel(const T* __restrict__ grad_out, const T* __restrict__ x,
                                      const T* __restrict__ weight, const float* __restrict__ inv_rms,
                                      const T* __restrict__ residual_grad, T* __restrict__ grad_x,
                                      float* __restrict__ partials, int64_t rows, int64_t cols) {
  constexpr int kN = Vec<T>::kN;
  const int vectors = static_cast<int>(cols / kN);
  // The weight is the same for every row: read once, kept in registers, and
  // so is this block's share of its gradient.
  float w[kPer][kN], dw[kPer][kN];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int vi = k * blockDim.x + threadIdx.x;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      w[k][j] = vi < vectors ? ToFloat(weight[vi * kN + j]) : 0.f;
      dw[k][j] = 0.f;
    }
  }
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float inv = inv_rms[row];
    const Vec<T>* gr = reinterpret_cast<const Vec<T>*>(grad_out + row * cols);
    const Vec<T>* xr = reinterpret_cast<const Vec<T>*>(x + row * cols);
    float gn[kPer][kN], xv[kPer][kN];
    float dot = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int vi = k * blockDim.x + threadIdx.x;
      if (vi < vectors) {
        const Vec<T> gvec = gr[vi], xvec = xr[vi];
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          const float g = ToFloat(gvec.v[j]);
          xv[k][j] = ToFloat(xvec.v[j]);
          gn[k][j] = Round<T>(g * w[k][j]);         // grad of normed = grad_out * weight, in T
          dw[k][j] += g * Round<T>(xv[k][j] * inv);  // grad of weight = grad_out * normed
          dot += gn[k][j] * xv[k][j];
        }
      }
    }
    dot = BlockSum(dot);
    const float c = inv * inv * inv * dot / static_cast<float>(cols);
    Vec<T>* gxr = reinterpret_cast<Vec<T>*>(grad_x + row * cols);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int vi = k * blockDim.x + threadIdx.x;
      if (vi < vectors) {
        Vec<T> o;
        if constexpr (kResidual) {
          // Rounded as autograd's add of two T tensors would round: the
          // norm's gradient to T first, then the sum.
          const Vec<T> r = reinterpret_cast<const Vec<T>*>(residual_grad + row * cols)[vi];
#pragma unroll
          for (int j = 0; j < kN; ++j)
            o.v[j] = FromFloat<T>(Round<T>(inv * gn[k][j] - c * xv[k][j]) + ToFloat(r.v[j]));
        } else {
#pragma unroll
          for (int j = 0; j < kN; ++j) o.v[j] = FromFloat<T>(inv * gn[k][j] - c * xv[k][j]);
        }
        gxr[vi] = o;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int vi = k * blockDim.x + threadIdx.x;
    if (vi < vectors) {
#pragma unroll
      for (int j = 0; j < kN; ++j) partials[blockIdx.x * cols + vi * kN + j] = dw[k][j];
    }
  }
}

// Threads per row: one vector each up to kMaxRowThreads, rounded up to whole
// warps; beyond that each thread holds kPer vectors.
template <typename T>
void RowShape(int64_t cols, int* threads, int* per) {
  const int64_t vectors = cols / Vec<T>::kN;
  *per = static_cast<int>((vectors + kMaxRowThreads - 1) / kMaxRowThreads);
  const int64_t t = (vectors + *per - 1) / *per;
  *threads = static_cast<int>(std::max<int64_t>(32, (t + 31) / 32 * 32));
}

template <typename T>
void RmsNormForward(const void* x, const void* weight, void* out, float* inv_rms, int64_t rows, int64_t cols,
                    float eps, cudaStream_t stream) {
  int threads = 0, per = 0;
  RowShape<T>(cols, &threads, &per);
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(weight);
  auto* ot = static_cast<T*>(out);
  if (per == 1) {
    RmsNormForwardKernel<T, 1><<<rows, threads, 0, stream>>>(xt, wt, ot, inv_rms, cols, eps);
  } else {
    RmsNormForwardKernel<T, 2><<<rows, threads, 0, stream>>>(xt, wt, ot, inv_rms, cols, eps);
  }
}

template <typename T, int kPer>
void RmsNormBackwardShaped(const T* gt, const T* xt, const T* wt, const float* inv_rms, const T* rt, T* gxt,
                           float* partials, int64_t rows, int64_t cols, int blocks, int threads, cudaStream_t stream) {
  if (rt != nullptr) {
    RmsNormBackwardKernel<T, kPer, true><<<blocks, threads, 0, stream>>>(gt, xt, wt, inv_rms, rt, gxt, partials, rows, cols);
  } else {
    RmsNormBackwardKernel<T, kPer, false><<<blocks, threads, 0, stream>>>(gt, xt, wt, inv_rms, rt, gxt, partials, rows, cols);
  }
}

template <typename T>
void RmsNormBackward(const void* grad_out, const void* x, const void* weight, const float* inv_rms,
                     const void* residual_grad, void* grad_x, float* partials, int64_t rows, int64_t cols,
                     cudaStream_t stream) {
  int threads = 0, per = 0;
  RowShape<T>(cols, &threads, &per);
  const int blocks = static_cast<int>(RmsNormBackwardPartials(rows));
  const auto* gt = static_cast<const T*>(grad_out);
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(weight);
  const auto* rt = static_cast<const T*>(residual_grad);
  auto* gxt = static_cast<T*>(grad_x);
  if (per == 1) {
    RmsNormBackwardShaped<T, 1>(gt, xt, wt, inv_rms, rt, gxt, partials, rows, cols, blocks, threads, stream);
  } else {
    RmsNormBackwardShaped<T, 2>(gt, xt, wt, inv_rms, rt, gxt, partials, rows, cols, blocks, threads, stream);
  }
}

// ---------------------------------------------------------------------------
// RoPE. One thread per (token, head, vector of the first half): it loads the
// matching vector of the second half too, since rotate_half pairs element j
// with element j + head_dim / 2. Tokens lie `in_stride` / `out_stride`
// elements apart, so q and k are rotated straight out of (and their
// gradients written straight into) the rows of a packed q/k/v projection.

template <typename T, bool kBackward>
__global__ void RopeKernel(const T* __restrict__ in, const T* __restrict__ cos, const T* __restrict__ sin,
                           T* __restrict__ out, int64_t tokens, int64_t seq, int64_t heads, int64_t head_dim,
                           int64_t in_stride, int64_t out_stride) {
  constexpr int kN = Vec<T>::kN;
  const int64_t half = head_dim / 2;
  const int64_t chunks = half / kN;
  const int64_t total = tokens * heads * chunks;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t chunk = i % chunks;
    const int64_t token_head = i / chunks;
    const int64_t token = token_head / heads, head = token_head % heads;
    const int64_t pos = token % seq;
    const int64_t within = head * head_dim + chunk * kN;
    const int64_t src = token * in_stride + within, dst = token * out_stride + within;
    const int64_t table = pos * head_dim + chunk * kN;
    const Vec<T> a = *reinterpret_cast<const Vec<T>*>(in + src);
    const Vec<T> b = *reinterpret_cast<const Vec<T>*>(in + src + half);
    const Vec<T> c1 = *reinterpret_cast<const Vec<T>*>(cos + table);
    const Vec<T> c2 = *reinterpret_cast<const Vec<T>*>(cos + table + half);
    const Vec<T> s1 = *reinterpret_cast<const Vec<T>*>(sin + table);
    const Vec<T> s2 = *reinterpret_cast<const Vec<T>*>(sin + table + half);
    Vec<T> o1, o2;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float x1 = ToFloat(a.v[j]), x2 = ToFloat(b.v[j]);
      if constexpr (kBackward) {
        // x1 reaches out1 through cos1 and out2 through sin2; x2 reaches out2
        // through cos2 and out1 through -sin1.
        o1.v[j] = FromFloat<T>(x1 * ToFloat(c1.v[j]) + x2 * ToFloat(s2.v[j]));
        o2.v[j] = FromFloat<T>(x2 * ToFloat(c2.v[j]) - x1 * ToFloat(s1.v[j]));
      } else {
        // x * cos + rotate_half(x) * sin, each product rounded as LibTorch's.
        o1.v[j] = FromFloat<T>(Round<T>(x1 * ToFloat(c1.v[j])) + Round<T>(-x2 * ToFloat(s1.v[j])));
        o2.v[j] = FromFloat<T>(Round<T>(x2 * ToFloat(c2.v[j])) + Round<T>(x1 * ToFloat(s2.v[j])));
      }
    }
    *reinterpret_cast<Vec<T>*>(out + dst) = o1;
    *reinterpret_cast<Vec<T>*>(out + dst + half) = o2;
  }
}

template <typename T, bool kBackward>
void Rope(const void* in, const void* cos, const void* sin, void* out, int64_t tokens, int64_t seq, int64_t heads,
          int64_t head_dim, int64_t in_stride, int64_t out_stride, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t work = tokens * heads * (head_dim / 2 / Vec<T>::kN);
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, 132 * 16)));
  RopeKernel<T, kBackward><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(in), static_cast<const T*>(cos),
                                                          static_cast<const T*>(sin), static_cast<T*>(out), tokens,
                                                          seq, heads, head_dim, in_stride, out_stride);
}

// ---------------------------------------------------------------------------
// Rows copied between strided layouts in 16-byte vectors: v out of the
// packed q/k/v rows, and its gradient back into the packed gradient's.
// ATen's copy_ of those strided views runs its generic element-wise kernel,
// one 2-byte element per load: 25 us for a 1B block's v ([16,384, 512]
// bf16) on an H100, where moving 16 bytes a load took 13.4 us.

__global__ void CopyRowsKernel(const uint4* __restrict__ src, int64_t src_stride, uint4* __restrict__ dst,
                               int64_t dst_stride, int64_t rows, int64_t row_vectors) {
  const int64_t total = rows * row_vectors;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t r = i / row_vectors, c = i % row_vectors;
    dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

// ---------------------------------------------------------------------------
// SwiGLU. Element (r, c) of gate and up sits at r * pair_stride + c (the two
// halves of a packed gate/up row, or two contiguous tensors), of out and the
// incoming gradient at r * cols + c. Grid-stride over 16-byte vectors when
// every pointer and both row lengths allow it, over elements otherwise.

template <typename T>
__device__ __forceinline__ void SwiGluForward1(T gate, T up, T* out) {
  const float g = ToFloat(gate);
  const float silu = Round<T>(g / (1.f + expf(-g)));  // at::silu, in T
  *out = FromFloat<T>(silu * ToFloat(up));
}

template <typename T>
__device__ __forceinline__ void SwiGluBackward1(T grad, T gate, T up, T* grad_gate, T* grad_up) {
  const float dy = ToFloat(grad), g = ToFloat(gate), u = ToFloat(up);
  const float e = expf(-g);
  const float sig = 1.f / (1.f + e);
  const float silu = Round<T>(g / (1.f + e));  // as the forward computed it
  const float dsilu = Round<T>(dy * u);  // the product's gradient w.r.t. silu(gate), in T
  *grad_up = FromFloat<T>(dy * silu);
  *grad_gate = FromFloat<T>(dsilu * sig * (1.f + g * (1.f - sig)));
}

// Offsets of item i (a vector when kVector, an element otherwise) of `row`
// items per row: in the gate/up pair rows and in the contiguous rows.
struct PairIndex {
  int64_t pair, flat;
};
__device__ __forceinline__ PairIndex Locate(int64_t i, int64_t row, int64_t pair_row) {
  return {i / row * pair_row + i % row, i};
}

template <typename T, bool kVector>
__global__ void SwiGluForwardKernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out,
                                    int64_t rows, int64_t cols, int64_t pair_stride) {
  constexpr int kW = kVector ? Vec<T>::kN : 1;
  using Item = std::conditional_t<kVector, Vec<T>, T>;
  const int64_t row = cols / kW, pair_row = pair_stride / kW, total = rows * row;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const PairIndex at = Locate(i, row, pair_row);
    const Item g = reinterpret_cast<const Item*>(gate)[at.pair], u = reinterpret_cast<const Item*>(up)[at.pair];
    Item o;
    if constexpr (kVector) {
#pragma unroll
      for (int j = 0; j < kW; ++j) SwiGluForward1(g.v[j], u.v[j], &o.v[j]);
    } else {
      SwiGluForward1(g, u, &o);
    }
    reinterpret_cast<Item*>(out)[at.flat] = o;
  }
}

template <typename T, bool kVector>
__global__ void SwiGluBackwardKernel(const T* __restrict__ grad, const T* __restrict__ gate, const T* __restrict__ up,
                                     T* __restrict__ grad_gate, T* __restrict__ grad_up, int64_t rows, int64_t cols,
                                     int64_t pair_stride) {
  constexpr int kW = kVector ? Vec<T>::kN : 1;
  using Item = std::conditional_t<kVector, Vec<T>, T>;
  const int64_t row = cols / kW, pair_row = pair_stride / kW, total = rows * row;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const PairIndex at = Locate(i, row, pair_row);
    const Item d = reinterpret_cast<const Item*>(grad)[at.flat];
    const Item g = reinterpret_cast<const Item*>(gate)[at.pair], u = reinterpret_cast<const Item*>(up)[at.pair];
    Item dg, du;
    if constexpr (kVector) {
#pragma unroll
      for (int j = 0; j < kW; ++j) SwiGluBackward1(d.v[j], g.v[j], u.v[j], &dg.v[j], &du.v[j]);
    } else {
      SwiGluBackward1(d, g, u, &dg, &du);
    }
    reinterpret_cast<Item*>(grad_gate)[at.pair] = dg;
    reinterpret_cast<Item*>(grad_up)[at.pair] = du;
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

int ElementwiseBlocks(int64_t work) {
  constexpr int64_t kThreads = 256;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, 132 * 16)));
}

// Whether a SwiGLU over these buffers can move whole 16-byte vectors.
template <typename T>
bool SwiGluVectors(std::initializer_list<const void*> buffers, int64_t cols, int64_t pair_stride) {
  constexpr int64_t kN = Vec<T>::kN;
  if (cols % kN != 0 || pair_stride % kN != 0) return false;
  for (const void* p : buffers)
    if (!Aligned16(p)) return false;
  return true;
}

template <typename T>
void SwiGluForward(const void* gate, const void* up, void* out, int64_t rows, int64_t cols, int64_t pair_stride,
                   cudaStream_t stream) {
  const auto* g = static_cast<const T*>(gate);
  const auto* u = static_cast<const T*>(up);
  auto* o = static_cast<T*>(out);
  if (SwiGluVectors<T>({gate, up, out}, cols, pair_stride)) {
    SwiGluForwardKernel<T, true><<<ElementwiseBlocks(rows * cols / Vec<T>::kN), 256, 0, stream>>>(g, u, o, rows, cols,
                                                                                                 pair_stride);
  } else {
    SwiGluForwardKernel<T, false><<<ElementwiseBlocks(rows * cols), 256, 0, stream>>>(g, u, o, rows, cols, pair_stride);
  }
}

template <typename T>
void SwiGluBackward(const void* grad, const void* gate, const void* up, void* grad_gate, void* grad_up, int64_t rows,
                    int64_t cols, int64_t pair_stride, cudaStream_t stream) {
  const auto* d = static_cast<const T*>(grad);
  const auto* g = static_cast<const T*>(gate);
  const auto* u = static_cast<const T*>(up);
  auto* dg = static_cast<T*>(grad_gate);
  auto* du = static_cast<T*>(grad_up);
  if (SwiGluVectors<T>({grad, gate, up, grad_gate, grad_up}, cols, pair_stride)) {
    SwiGluBackwardKernel<T, true><<<ElementwiseBlocks(rows * cols / Vec<T>::kN), 256, 0, stream>>>(
        d, g, u, dg, du, rows, cols, pair_stride);
  } else {
    SwiGluBackwardKernel<T, false><<<ElementwiseBlocks(rows * cols), 256, 0, stream>>>(d, g, u, dg, du, rows, cols,
                                                                                      pair_stride);
  }
}

// Column sums of the RMSNorm backward's fp32 partial weight gradients, in
// the weight's dtype. One thread per column walks the rows in order with
// four accumulators (rows r, r+1, r+2, r+3: independent adds in flight, then
// summed in a fixed order), so the result is deterministic; neighbouring
// threads read neighbouring floats of each row (coalesced). ATen's
// `partials.sum(0)` for the same [1056, 2048] took a 17 MiB global staging
// buffer of its own (measured on H200), twice the partials,
// and a second kernel for the cast.
// The partials are ~1,000 rows of `cols` fp32 (8.6 MB for a 2,048-wide norm).
// One thread per column left 8 blocks of 256 threads to read them on a
// 132-SM GPU: 75 us, latency-bound, on an H100 (33 launches a step of the 1B
// plan, 2.5 ms). Here a block takes kSumCols columns and kSumLanes lanes of
// rows: a warp reads one row's kSumCols consecutive floats (whole 128-byte
// lines), a lane sums every kSumLanes-th row, and the lanes' sums are added
// in lane order through shared memory, so the result is the same bits on
// every run.
constexpr int kSumCols = 32;
constexpr int kSumLanes = 32;

template <typename T>
__global__ void __launch_bounds__(kSumCols * kSumLanes) SumPartialRowsKernel(const float* __restrict__ partials,
                                                                            int64_t rows, int64_t cols,
                                                                            T* __restrict__ out) {
  __shared__ float lane_sums[kSumLanes][kSumCols + 1];  // +1: no bank conflicts on the column reads below
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kSumCols + threadIdx.x;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (c < cols) {
    int64_t r = threadIdx.y;
    for (; r + 3 * kSumLanes < rows; r += 4 * kSumLanes) {
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[k] += partials[(r + k * kSumLanes) * cols + c];
    }
    for (; r < rows; r += kSumLanes) acc[0] += partials[r * cols + c];
  }
  lane_sums[threadIdx.y][threadIdx.x] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float total = 0.f;
#pragma unroll
  for (int lane = 0; lane < kSumLanes; ++lane) total += lane_sums[lane][threadIdx.x];
  out[c] = FromFloat<T>(total);
}

void CheckLaunch(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) throw std::runtime_error(std::string(what) + " launch failed: " + cudaGetErrorString(error));
}

}  // namespace

int64_t RmsNormBackwardPartials(int64_t rows) { return std::max<int64_t>(1, std::min(rows, kRmsNormBackwardMaxPartials)); }

void LaunchSumPartialRows(KernelDType out_dtype, const float* partials, int64_t rows, int64_t cols, void* out,
                          void* stream) {
  if (cols <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  const dim3 threads(kSumCols, kSumLanes);
  const auto blocks = static_cast<unsigned>((cols + kSumCols - 1) / kSumCols);
  if (out_dtype == KernelDType::kBF16) {
    SumPartialRowsKernel<__nv_bfloat16><<<blocks, threads, 0, st>>>(partials, rows, cols, static_cast<__nv_bfloat16*>(out));
  } else {
    SumPartialRowsKernel<float><<<blocks, threads, 0, st>>>(partials, rows, cols, static_cast<float*>(out));
  }
  CheckLaunch("RMSNorm weight gradient sum");
}

void LaunchRmsNormForward(KernelDType dtype, const void* x, const void* weight, void* out, float* inv_rms,
                          int64_t rows, int64_t cols, float eps, void* stream) {
  if (rows <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == KernelDType::kBF16) {
    RmsNormForward<__nv_bfloat16>(x, weight, out, inv_rms, rows, cols, eps, st);
  } else {
    RmsNormForward<float>(x, weight, out, inv_rms, rows, cols, eps, st);
  }
  CheckLaunch("RMSNorm forward");
}

void LaunchRmsNormBackward(KernelDType dtype, const void* grad_out, const void* x, const void* weight,
                           const float* inv_rms, const void* residual_grad, void* grad_x,
                           float* grad_weight_partials, int64_t rows, int64_t cols, void* stream) {
  if (rows <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == KernelDType::kBF16) {
    RmsNormBackward<__nv_bfloat16>(grad_out, x, weight, inv_rms, residual_grad, grad_x, grad_weight_partials, rows,
                                   cols, st);
  } else {
    RmsNormBackward<float>(grad_out, x, weight, inv_rms, residual_grad, grad_x, grad_weight_partials, rows, cols, st);
  }
  CheckLaunch("RMSNorm backward");
}

void LaunchRopeForward(KernelDType dtype, const void* x, const void* cos, const void* sin, void* out,
                       int64_t tokens, int64_t seq, int64_t heads, int64_t head_dim, int64_t in_token_stride,
                       int64_t out_token_stride, void* stream) {
  if (tokens <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == KernelDType::kBF16) {
    Rope<__nv_bfloat16, false>(x, cos, sin, out, tokens, seq, heads, head_dim, in_token_stride, out_token_stride, st);
  } else {
    Rope<float, false>(x, cos, sin, out, tokens, seq, heads, head_dim, in_token_stride, out_token_stride, st);
  }
  CheckLaunch("RoPE forward");
}

void LaunchRopeBackward(KernelDType dtype, const void* grad_out, const void* cos, const void* sin, void* grad_x,
                        int64_t tokens, int64_t seq, int64_t heads, int64_t head_dim, int64_t in_token_stride,
                        int64_t out_token_stride, void* stream) {
  if (tokens <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == KernelDType::kBF16) {
    Rope<__nv_bfloat16, true>(grad_out, cos, sin, grad_x, tokens, seq, heads, head_dim, in_token_stride,
                              out_token_stride, st);
  } else {
    Rope<float, true>(grad_out, cos, sin, grad_x, tokens, seq, heads, head_dim, in_token_stride, out_token_stride, st);
  }
  CheckLaunch("RoPE backward");
}

void LaunchCopyRows(const void* src, int64_t src_stride_bytes, void* dst, int64_t dst_stride_bytes, int64_t rows,
                    int64_t row_bytes, void* stream) {
  if (rows <= 0 || row_bytes <= 0) return;
  constexpr int kThreads = 256;
  const int64_t row_vectors = row_bytes / 16;
  const int64_t work = rows * row_vectors;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, 132 * 16)));
  CopyRowsKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(src), src_stride_bytes / 16, static_cast<uint4*>(dst), dst_stride_bytes / 16, rows,
      row_vectors);
  CheckLaunch("row copy");
}

void LaunchSwiGluForward(KernelDType dtype, const void* gate, const void* up, void* out, int64_t rows, int64_t cols,
                         int64_t pair_stride, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == KernelDType::kBF16) {
    SwiGluForward<__nv_bfloat16>(gate, up, out, rows, cols, pair_stride, st);
  } else {
    SwiGluForward<float>(gate, up, out, rows, cols, pair_stride, st);
  }
  CheckLaunch("SwiGLU forward");
}

void LaunchSwiGluBackward(KernelDType dtype, const void* grad_out, const void* gate, const void* up,
                          void* grad_gate, void* grad_up, int64_t rows, int64_t cols, int64_t pair_stride,
                          void* stream) {
  if (rows <= 0 || cols <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == KernelDType::kBF16) {
    SwiGluBackward<__nv_bfloat16>(grad_out, gate, up, grad_gate, grad_up, rows, cols, pair_stride, st);
  } else {
    SwiGluBackward<float>(grad_out, gate, up, grad_gate, grad_up, rows, cols, pair_stride, st);
  }
  CheckLaunch("SwiGLU backward");
}

}  // namespace llmplan::executor
