// MeasureCpuAdamWBesideCopies: how much the offloaded optimizer's host pass
// slows while pinned host <-> device copies run — the profile's
// host.cpu_adam_slowdown_during_copies. CpuAdamW is bound by host memory
// bandwidth (30 bytes per parameter) and a pinned copy's DMA reads or writes
// host memory at the link's rate, so the two share it: with staging slots,
// each unit's gradient comes down while the host updates the unit before it
// (1.11 s instead of 0.93 s of CPU AdamW, Llama-3.2-3B on one H200).
// The copies are cudaMemcpyAsync from and to pinned memory, as
// the executor's non_blocking tensor copies are, queued back to back on two
// streams (one per direction, as the executor's copy streams) before each
// timed update; an update counts only when both were still running at its
// end (MeasureCpuAdamWBeside).
//
// It also times the copies the other way round: one each way alone, then
// beside updates running back to back (host.copy_slowdown_during_cpu_adam).
//
// This header needs no CUDA; the function exists only in CUDA builds
// (cpu_adamw_copies_cuda.cc).
#pragma once

#include <cstdint>

#include "executor/profile/profile_measurements.h"

namespace llmplan::executor {

#ifdef LLMPLAN_WITH_CUDA
// `params` elements on `threads` threads, copies of `copy_bytes` each way
// between pinned host memory and `device`; one warm-up, medians of `repeats`.
// REQUIRES: device visible; params >= 1; threads >= 1; copy_bytes > 0;
// repeats >= 1. Throws std::runtime_error when memory cannot be had, a copy
// fails, or the copies never outlast an update.
CpuAdamWCopiesMeasurement MeasureCpuAdamWBesideCopies(int device, int64_t params, int threads, double copy_bytes,
                                                      int repeats);
#endif

}  // namespace llmplan::executor
