#include "executor/run/loader_watch.h"

#include <cstdio>

namespace llmplan::executor {

std::string LoaderWatch::Step(int64_t step, double data_s, double step_s, int loader_workers, int loader_prefetch) {
  timed_data_s_ += data_s;
  timed_step_s_ += step_s;
  if (data_s > kFraction * step_s) ++bound_steps_;
  window_.push_back({step, data_s, step_s});
  if (window_.size() > kWindow) window_.pop_front();
  double waited = 0, took = 0;
  for (const Entry& e : window_) {
    waited += e.data_s;
    took += e.step_s;
  }
  if (window_.size() < kMinSteps || waited <= kFraction * took) return "";
  if (last_warning_ >= 0 && step - last_warning_ < kEvery) return "";
  last_warning_ = step;
  char line[400];
  std::snprintf(line, sizeof line,
                "steps %lld-%lld waited %.3f s of their %.3f s (%.0f%%) for batches: the data loader is the "
                "bottleneck (--loader-workers %d, --loader-prefetch %d): raise --loader-workers, or put the token "
                "file on a faster disk",
                static_cast<long long>(window_.front().step), static_cast<long long>(step), waited, took,
                100.0 * waited / took, loader_workers, loader_prefetch);
  return line;
}

}  // namespace llmplan::executor
