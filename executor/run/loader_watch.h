// LoaderWatch: is the data loader the bottleneck? Judged over the last
// kWindow steps (the run's first left out: its loader may have just
// started): the trainer waited for batches more than kFraction of their wall
// time. A loader that keeps up hands over a prepared batch in microseconds,
// so a wait that long is the device idle for want of data: a tenth of the
// run's GPU-hours, if it lasts. Judged over several steps, not one: a single
// late batch (the loader's thread descheduled on a busy host: 10 ms in a
// 78 ms step was seen on a 2-core machine) is not a loader worth changing.
// The warning comes once, then at most once per kEvery steps.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

namespace llmplan::executor {

class LoaderWatch {
 public:
  static constexpr double kFraction = 0.1;
  static constexpr size_t kWindow = 10;
  static constexpr size_t kMinSteps = 3;
  static constexpr int64_t kEvery = 100;

  // After a step after the first; returns the warning to print, or "".
  std::string Step(int64_t step, double data_s, double step_s, int loader_workers, int loader_prefetch);
  // Over every step seen: the share of their time spent waiting for batches,
  // and the steps that waited more than kFraction of their own time.
  double wait_fraction() const { return timed_step_s_ > 0 ? timed_data_s_ / timed_step_s_ : 0; }
  int64_t bound_steps() const { return bound_steps_; }

 private:
  struct Entry {
    int64_t step;
    double data_s, step_s;
  };
  std::deque<Entry> window_;
  double timed_data_s_ = 0, timed_step_s_ = 0;
  int64_t bound_steps_ = 0, last_warning_ = -1;
};

}  // namespace llmplan::executor
