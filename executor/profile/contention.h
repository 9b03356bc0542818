// MeasureContention: how much collectives and compute slow each other on the
// GPUs of this host — the profile's collectives.slowdown_during_compute and
// compute.slowdown_during_collectives, which a one-GPU run cannot show and a
// multi-GPU run cannot separate from the collective curves' scales.
//
// As training runs them: the compute is one Llama-3-8B block's forward GEMMs
// (ContentionBlockGemms, at::linear in bf16) on each GPU's current stream;
// the collectives are NCCL's on a stream of the device's highest priority, as
// the executor's communicators use (comm/nccl_communicator.h).
//   collective beside compute: every GPU first queues enough GEMMs to outlast
//     the timed collectives, then the collectives run back to back.
//   compute beside collectives: every GPU first queues enough all-gathers of
//     gather_bytes to outlast the timed GEMMs, then the GEMMs run.
// Each time is CUDA events on the measured op's own stream around a batch of
// back-to-back calls, the slowest GPU's, the median of `repeats` batches,
// after a warm-up. A batch counts only when events on the other stream show
// that the other work ran for all of it (started before, ended after); if it
// did not, the cover is doubled and the batch run again.
//
// This header needs neither CUDA nor NCCL; the function exists only in CUDA
// builds (contention_cuda.cc).
#pragma once

#include <functional>
#include <vector>

#include "executor/profile/profile_measurements.h"

namespace llmplan::executor {

#ifdef LLMPLAN_WITH_CUDA
// `sizes`: full buffer bytes of the collectives timed alone and beside
// compute, rounded down to whole bf16 elements per GPU. `batch_seconds`: the
// aim of one timed batch. `progress(done, total)` after each size of each op
// and after the compute.
// REQUIRES: devices distinct and visible, at least 2; sizes and gather_bytes
// positive; repeats >= 1. Throws std::runtime_error (CUDA, NCCL) or
// c10::Error (LibTorch: out of memory) naming what failed.
ContentionMeasurement MeasureContention(const std::vector<int>& devices, const std::vector<double>& sizes,
                                        double gather_bytes, int repeats, double batch_seconds,
                                        const std::function<void(int done, int total)>& progress);
#endif

}  // namespace llmplan::executor
