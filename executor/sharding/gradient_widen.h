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
// one launch on `stream` (a cudaStream_t). With square_partials (else null),
// the same pass also sums the squares of the values it writes: block b of the
// launch writes its fp32 sum to square_partials[b], so their sum is the
// squared L2 norm of out (what gradient clipping needs) without a second
// read of out; the order of the additions is fixed, so the result is the
// same on every run. With out null the pass only reads: the squares of the
// widened input (a bf16 gradient AdamW reads as it is, gradient_path.h), in
// the same blocks and order, so the same sums as a pass that writes.
// Returns false (launching nothing) when in or out is not 16-byte aligned:
// the caller then uses LibTorch's kernels.
// REQUIRES: device pointers on the current device; n >= 0; square_partials
// holds WidenBf16Partials(n) floats; with out null, square_partials and not
// accumulate.
bool LaunchWidenBf16(const void* in_bf16, float* out, int64_t n, bool accumulate, float* square_partials,
                     void* stream);

// The number of blocks (partial sums) LaunchWidenBf16 uses for n elements.
int64_t WidenBf16Partials(int64_t n);

}  // namespace llmplan::executor
