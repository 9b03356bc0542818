// The fp32 gradient shard taking a bf16 contribution: out = in (widened) or
// out += in, on the GPU in one pass of 16-byte loads and stores.
//
// Why not LibTorch's copy_ / add_: a bf16 -> fp32 copy or a mixed-dtype add
// goes through ATen's unrolled, dynamically casting kernel, which measured
// 1.4 TB/s (copy) and 1.8 TB/s (add) on an H200 for a Llama-3.2-1B block's
// gradient; this kernel reads 8 bf16 per load and moves the 6 or 10 bytes per
// element at HBM speed. Widening is exact, so the values equal ATen's.
//
// Free of LibTorch headers: compiled by nvcc (gradient_widen.cu), called
// from FlatUnit.
#pragma once

#include <cstdint>

namespace llmplan::executor {

// out[i] = in[i] (accumulate false) or out[i] += in[i], i < n, in fp32, as
// one launch on `stream` (a cudaStream_t). Returns false (launching nothing)
// when in is not 16-byte aligned or out not 16-byte aligned: the caller then
// uses LibTorch's kernels.
// REQUIRES: device pointers on the current device; n >= 0.
bool LaunchWidenBf16(const void* in_bf16, float* out, int64_t n, bool accumulate, void* stream);

}  // namespace llmplan::executor
