#include "executor/run/host_memory_watch.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace llmplan::executor {

int64_t ProcessAnonRssBytes() {
  // RssAnon: a mapped token file's pages count as resident once read, and
  // grow with the data a run has seen; they are the page cache's to drop,
  // not a leak.
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssAnon:", 0) != 0) continue;
    std::istringstream fields(line.substr(8));
    int64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

std::string HostMemoryWatch::Step(int64_t step, double step_s, int64_t rss_bytes) {
  ++steps_seen_;
  if (steps_seen_ <= kWarmUpSteps || rss_bytes <= 0) return "";
  total_step_s_ += step_s;
  if ((steps_seen_ - kWarmUpSteps - 1) % stride_ == 0) samples_.push_back({step, rss_bytes});
  if (samples_.size() > kMaxSamples) {
    std::vector<Sample> kept;
    for (size_t i = 0; i < samples_.size(); i += 2) kept.push_back(samples_[i]);
    samples_ = std::move(kept);
    stride_ *= 2;
  }
  if (growth_ || samples_.size() < kMinSteps) return "";

  const size_t quarter = samples_.size() / 4;
  int64_t earlier_max = 0, later_min = INT64_MAX;
  for (size_t i = 0; i < quarter; ++i) earlier_max = std::max(earlier_max, samples_[i].rss);
  for (size_t i = samples_.size() - quarter; i < samples_.size(); ++i) later_min = std::min(later_min, samples_[i].rss);
  const double margin = std::max(static_cast<double>(kMinGrowthBytes), kMinGrowthFraction * earlier_max);
  if (static_cast<double>(later_min - earlier_max) <= margin) return "";

  // The slope, bytes per step, by least squares over the samples.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(samples_.size());
  for (const Sample& s : samples_) {
    const double x = static_cast<double>(s.step), y = static_cast<double>(s.rss);
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  HostMemoryGrowth g;
  g.from_step = samples_.front().step;
  g.to_step = samples_.back().step;
  g.from_bytes = samples_.front().rss;
  g.to_bytes = samples_.back().rss;
  g.bytes_per_step = slope;
  const double mean_step_s = total_step_s_ / static_cast<double>(steps_seen_ - kWarmUpSteps);
  g.bytes_per_hour = mean_step_s > 0 ? slope * 3600 / mean_step_s : 0;
  growth_ = g;
  char line[400];
  std::snprintf(line, sizeof line,
                "host memory keeps growing: %.2f GiB resident (heap and pinned) at step %lld, %.2f GiB at step %lld, %+.1f MiB a step "
                "(%+.2f GiB an hour): a leak in this process; a long run will run the host out of memory",
                static_cast<double>(g.from_bytes) / (1 << 30), static_cast<long long>(g.from_step),
                static_cast<double>(g.to_bytes) / (1 << 30), static_cast<long long>(g.to_step),
                slope / (1 << 20), g.bytes_per_hour / (1 << 30));
  return line;
}

}  // namespace llmplan::executor
