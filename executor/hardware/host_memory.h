// Host memory for the buffers that cross between host and GPU every step:
// offloaded master weights, AdamW state, gradient and parameter staging.
//
// Page-locked (pinned) when a GPU is present, so each copy is one DMA that
// runs while the host and the GPU do other work. Allocated at exactly the
// requested size with cudaHostAlloc, not through LibTorch's caching host
// allocator: that one rounds every request up to a power of two (an 8B
// model's 872 MB block buffers become 1 GiB, +23%, ~30 GiB over the whole
// offloaded state) and keeps freed blocks, so the planner's host figure
// would not be what the process pins.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace llmplan::executor {

// A zero-filled 1-D tensor of `numel` elements of `dtype` in host memory,
// pinned when CUDA is available (plain memory otherwise, e.g. the CPU-only
// LibTorch 1.13 build). The memory is returned when the last tensor
// sharing it is destroyed.
// REQUIRES: numel >= 0. Throws UserError naming the size when the host
// cannot pin that much (the usual cause: the plan's host figure exceeds the
// node's memory; see llmplan estimate --host-memory).
at::Tensor PinnedHostZeros(int64_t numel, at::ScalarType dtype);

// Bytes currently pinned through PinnedHostZeros in this process.
int64_t PinnedHostBytes();
// The most PinnedHostBytes() has been since the process started.
int64_t PeakPinnedHostBytes();

}  // namespace llmplan::executor
