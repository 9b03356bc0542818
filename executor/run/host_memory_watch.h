// HostMemoryWatch: does the process's resident host memory keep growing? A
// training step allocates the same host buffers every time, so after the
// first steps (allocator caches, the loader's read-ahead, pinned staging)
// resident memory plateaus; one that still climbs hundreds of steps later is
// a leak, and it ends a long run hours in with the host out of memory — the
// classic silent failure, since nothing on the GPU shows it.
//
// Judged on the steps after kWarmUpSteps: once at least kMinSteps were seen,
// the lowest resident figure of the last quarter of them above the highest of
// the first quarter by more than max(kMinGrowthBytes, kMinGrowthFraction of
// it) is growth that did not level off (noise and a plateau reached early do
// not pass that; a steady climb does once half the steps lie between). The
// rate is the least-squares slope over those steps. Said once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llmplan::executor {

// The process's anonymous resident host memory now (RssAnon of
// /proc/self/status: heap and pinned buffers, not mapped files); 0 where it
// cannot be read.
int64_t ProcessAnonRssBytes();

// A leak as HostMemoryWatch measured it.
struct HostMemoryGrowth {
  int64_t from_step = 0, to_step = 0;
  int64_t from_bytes = 0, to_bytes = 0;  // resident at those steps
  double bytes_per_step = 0;             // the least-squares slope
  double bytes_per_hour = 0;             // the same at the run's mean step time
};

class HostMemoryWatch {
 public:
  static constexpr int64_t kWarmUpSteps = 10;
  static constexpr size_t kMinSteps = 20;
  static constexpr int64_t kMinGrowthBytes = int64_t{64} << 20;
  static constexpr double kMinGrowthFraction = 0.02;
  // Samples kept: past this, every other one is dropped (a run of a million
  // steps keeps a thousand, evenly spread).
  static constexpr size_t kMaxSamples = 2048;

  // After step `step` (of this process: the first is its warm-up), which took
  // `step_s`, with `rss_bytes` resident. Returns the warning to print the first
  // time growth is found, else "".
  std::string Step(int64_t step, double step_s, int64_t rss_bytes);
  // The growth found (once found, it stays).
  const std::optional<HostMemoryGrowth>& growth() const { return growth_; }

 private:
  struct Sample {
    int64_t step;
    int64_t rss;
  };
  int64_t steps_seen_ = 0;
  int64_t stride_ = 1;  // keep every stride_-th step
  double total_step_s_ = 0;
  std::vector<Sample> samples_;
  std::optional<HostMemoryGrowth> growth_;
};

}  // namespace llmplan::executor
