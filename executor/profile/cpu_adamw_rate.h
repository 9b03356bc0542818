// MeasureCpuAdamW: parameters per second of the offloaded optimizer's host
// pass (CpuAdamW, writing the bf16 compute copy in the same sweep, as the
// executor calls it) — the profile's cpu_adam_params_per_s. The loop is bound
// by host memory bandwidth (30 bytes per parameter), so it is measured both
// alone with every hardware thread and with every GPU's share of the host
// running at once, which is how the node's memory bandwidth gets split when
// each GPU's rank offloads. No LibTorch.
#pragma once

#include <cstdint>

#include "executor/profile/profile_measurements.h"

namespace llmplan::executor {

// `params` elements alone on `threads` threads; then `workers` updates of
// params / workers elements (at least 1 Mi) at once, threads / workers
// threads each (skipped when workers == 1). Each: one warm-up, median of
// `repeats`.
// REQUIRES: params >= 1; threads >= 1; workers >= 1; repeats >= 1.
CpuAdamWMeasurement MeasureCpuAdamW(int64_t params, int threads, int workers, int repeats);

}  // namespace llmplan::executor
