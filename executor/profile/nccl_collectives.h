// MeasureCollectives: NCCL all-gather, reduce-scatter and all-reduce of bf16
// buffers by size among GPUs of this host, from one process — the curves a
// profile's `collectives.intra_node` holds. One communicator per GPU from
// ncclCommInitAll; per size, one group call launches the op on every GPU.
// Times are CUDA events on each GPU's own stream around `iterations`
// back-to-back calls (the slowest GPU's), as nccl-tests measures them.
//
// This header needs neither CUDA nor NCCL; the function exists only in CUDA
// builds (nccl_collectives_cuda.cc).
#pragma once

#include <functional>
#include <vector>

#include "executor/profile/profile_measurements.h"

namespace llmplan::executor {

#ifdef LLMPLAN_WITH_CUDA
// `sizes`: full (unsharded) buffer bytes, rounded down so that every GPU's
// share is whole bf16 elements. `progress(done, total)` after each size and op.
// Also records the device memory the communicator took on devices[0]
// (cudaMemGetInfo before ncclCommInitAll and after the last collective).
// Sets NCCL_NVLS_ENABLE=0 first unless the environment sets it.
// REQUIRES: devices distinct and visible, at least 2; sizes positive.
// Throws std::runtime_error naming the failed call.
CollectiveMeasurement MeasureCollectives(const std::vector<int>& devices, const std::vector<double>& sizes,
                                         int warmup, int iterations,
                                         const std::function<void(int done, int total)>& progress);
#endif

}  // namespace llmplan::executor
