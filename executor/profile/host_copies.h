// MeasurePinnedCopies: pinned host <-> device copy rates, each direction alone
// and both at once on two streams — the profile's host_to_device,
// device_to_host and copies_share_link, which price offload's copies. The
// executor's copies are cudaMemcpyAsync from pinned memory (a tensor copy_
// with non_blocking), which is what is timed here, with CUDA events.
//
// This header needs no CUDA; the function exists only in CUDA builds
// (host_copies_cuda.cc).
#pragma once

#include "executor/profile/profile_measurements.h"

namespace llmplan::executor {

#ifdef LLMPLAN_WITH_CUDA
// Copies of `bytes` each, the median of `repeats` after one warm-up.
// REQUIRES: device visible; bytes > 0; repeats >= 1. Throws
// std::runtime_error when memory cannot be had or a copy fails.
HostCopyMeasurement MeasurePinnedCopies(int device, double bytes, int repeats);
#endif

}  // namespace llmplan::executor
