// MeasureCpuAdamW: parameters per second of the offloaded optimizer's host
// pass (CpuAdamW, writing the bf16 compute copy in the same sweep, as the
// executor calls it) — the profile's cpu_adam_params_per_s. The loop is bound
// by host memory bandwidth (30 bytes per parameter), so it is measured both
// alone with every hardware thread and with every GPU's share of the host
// running at once, which is how the node's memory bandwidth gets split when
// each GPU's rank offloads. MeasureCpuAdamWBeside times it again beside other
// work that shares host memory bandwidth with it (cpu_adamw_copies.h: pinned
// host<->device copies). No LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "executor/profile/profile_measurements.h"

namespace llmplan::executor {

// `params` elements alone on `threads` threads; then `workers` updates of
// params / workers elements (at least 1 Mi) at once, threads / workers
// threads each (skipped when workers == 1). Each: one warm-up, median of
// `repeats`.
// REQUIRES: params >= 1; threads >= 1; workers >= 1; repeats >= 1.
CpuAdamWMeasurement MeasureCpuAdamW(int64_t params, int threads, int workers, int repeats);

// Work that runs beside the update in MeasureCpuAdamWBeside, on another
// thread or a device's queues. `start(seconds)`: starts work meant to
// outlast `seconds` and returns without waiting for it; `still_running()`,
// asked right after the update: whether it still runs (so it ran for all of
// the update, having started before it); `finish()`: waits for it to end.
struct WorkBesideUpdate {
  std::function<void(double seconds)> start;
  std::function<bool()> still_running;
  std::function<void()> finish;
};

struct UpdateBesideSeconds {
  double alone = 0;   // per update, median
  double beside = 0;  // per update while `work` ran for all of it, median
};

// `params` elements on `threads` threads: one warm-up, the median of
// `repeats` updates alone, then of `repeats` updates each begun right after
// `work` started for 3x that median. An update the work did not outlast is
// run again with the work started for twice as long, up to 4 times.
// REQUIRES: params >= 1; threads >= 1; repeats >= 1; work's functions set.
// Throws std::runtime_error when the work never outlasted an update.
UpdateBesideSeconds MeasureCpuAdamWBeside(int64_t params, int threads, int repeats, const WorkBesideUpdate& work);

// Updates of `params` elements on `threads` threads, back to back on a
// thread of its own from construction until destruction: the work beside
// which copies are timed (the other half of the pairwise contention,
// cpu_adamw_copies.h). `updates()` counts those finished so far.
// REQUIRES: params >= 1; threads >= 1.
class BackgroundCpuAdamW {
 public:
  BackgroundCpuAdamW(int64_t params, int threads);
  ~BackgroundCpuAdamW();  // waits for the update in progress
  BackgroundCpuAdamW(const BackgroundCpuAdamW&) = delete;
  BackgroundCpuAdamW& operator=(const BackgroundCpuAdamW&) = delete;
  int updates() const;

 private:
  struct Loop;
  std::unique_ptr<Loop> loop_;
};

}  // namespace llmplan::executor
