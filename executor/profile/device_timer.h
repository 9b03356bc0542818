// SecondsPerCall: how long one call of some LibTorch work takes where it
// runs. On CUDA, events recorded on the current stream around a batch of
// back-to-back calls, so the time is the device's and the host's launch cost
// hides behind queued kernels (as in training); on the CPU, the host clock
// (ops are synchronous there). Batches are sized to a time budget from one
// trial call, and the median batch is kept: a shared machine's interruptions
// land in one batch, not in all.
#pragma once

#include <functional>

#include <c10/core/Device.h>

namespace llmplan::executor {

struct TimingBudget {
  double batch_seconds = 0.1;  // aim of each timed batch
  int batches = 3;
  int max_calls_per_batch = 1000;
};

// One warm-up call (kernels load, cuBLAS picks its algorithm), one trial
// call, then `budget.batches` timed batches; seconds per call of the median
// batch. `call` must issue its work on `device`'s current stream.
// REQUIRES: budget.batches >= 1, budget.max_calls_per_batch >= 1.
double SecondsPerCall(const c10::Device& device, const std::function<void()>& call, const TimingBudget& budget);

// How a GPU runs some work between other kernels, as a training step runs its
// GEMMs: `bursts` batches of about `burst_seconds` each, every one after
// `idle_seconds` with the device idle; seconds per call of the median batch.
// Why: a GPU at its power limit lowers its clock, and GEMMs back to back for
// a fifth of a second draw the most power there is. On one H100 (2026-12-07)
// the 1B plan's step spent 161.6 ms in GEMM kernels (a kernel trace); a
// profile fitted on bursts priced them at 161.3 ms, while SecondsPerCall's
// 0.2 s batches read the profile's shapes 10.5% slower. On the CPU (no power
// story, synchronous ops) this is SecondsPerCall.
// REQUIRES: bursts >= 1, burst_seconds > 0, idle_seconds >= 0.
double BurstSecondsPerCall(const c10::Device& device, const std::function<void()>& call, double burst_seconds,
                           int bursts, double idle_seconds);

}  // namespace llmplan::executor
