// MeasureCpuAdamW (see cpu_adamw_rate.h).
#include "executor/profile/cpu_adamw_rate.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "executor/optimizer/cpu_adamw.h"

namespace llmplan::executor {

namespace {

// The four fp32 arrays of an offloaded shard and its bf16 compute copy.
struct Shard {
  explicit Shard(int64_t n)
      : param(n, 0.01f), grad(n, 0.001f), exp_avg(n, 0.0f), exp_avg_sq(n, 0.0f), compute(n, 0) {}
  void Update(const AdamWScalars& s, int threads) {
    CpuAdamW(param.data(), grad.data(), exp_avg.data(), exp_avg_sq.data(), static_cast<int64_t>(param.size()), s,
             threads, compute.data(), /*compute_is_bf16=*/true);
  }
  std::vector<float> param, grad, exp_avg, exp_avg_sq;
  std::vector<uint16_t> compute;
};

AdamWScalars Scalars() {
  AdamWScalars s;
  s.decay = 1 - 1e-4f * 0.1f;
  s.step_size = -1e-4f;
  s.bias2_sqrt = 0.3f;
  return s;
}

template <typename F>
double MedianSeconds(int repeats, F&& run) {
  run();  // warm-up: first touch of the pages, thread start-up
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

CpuAdamWMeasurement MeasureCpuAdamW(int64_t params, int threads, int workers, int repeats) {
  CpuAdamWMeasurement m;
  m.params = params;
  m.threads = threads;
  m.workers = workers;
  const AdamWScalars s = Scalars();
  {
    Shard shard(params);
    m.seconds = MedianSeconds(repeats, [&] { shard.Update(s, threads); });
  }
  if (workers > 1) {
    m.params_each = std::max<int64_t>(params / workers, int64_t{1} << 20);
    const int threads_each = std::max(1, threads / workers);
    std::vector<Shard> shards;
    shards.reserve(workers);
    for (int w = 0; w < workers; ++w) shards.emplace_back(m.params_each);
    m.concurrent_seconds = MedianSeconds(repeats, [&] {
      std::vector<std::thread> running;
      for (Shard& shard : shards) running.emplace_back([&shard, &s, threads_each] { shard.Update(s, threads_each); });
      for (std::thread& t : running) t.join();
    });
  }
  return m;
}

}  // namespace llmplan::executor
