// MeasureCpuAdamW (see cpu_adamw_rate.h).
#include "executor/profile/cpu_adamw_rate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
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
  // The update on the host's clock (it is synchronous).
  double TimedUpdate(const AdamWScalars& s, int threads) {
    const auto start = std::chrono::steady_clock::now();
    Update(s, threads);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

double Median(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
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
  return Median(std::move(seconds));
}

// The work beside the update is started to outlast it slowed this much; an
// update it did not outlast is run again with twice the work, this many
// times at most (as MeasureContention covers its timed batches).
constexpr double kCoverMargin = 3;
constexpr int kCoverAttempts = 4;

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

UpdateBesideSeconds MeasureCpuAdamWBeside(int64_t params, int threads, int repeats, const WorkBesideUpdate& work) {
  const AdamWScalars s = Scalars();
  Shard shard(params);
  UpdateBesideSeconds out;
  out.alone = MedianSeconds(repeats, [&] { shard.Update(s, threads); });
  std::vector<double> beside;
  double cover = kCoverMargin * out.alone;
  for (int r = 0; r < repeats; ++r) {
    for (int attempt = 0;; ++attempt, cover *= 2) {
      work.start(cover);
      const double seconds = shard.TimedUpdate(s, threads);
      const bool covered = work.still_running();
      work.finish();
      if (covered) {
        beside.push_back(seconds);
        break;
      }
      if (attempt + 1 == kCoverAttempts)
        throw std::runtime_error("the work beside the CPU AdamW ended before the update even when started for " +
                                 std::to_string(cover) + " s");
    }
  }
  out.beside = Median(std::move(beside));
  return out;
}

struct BackgroundCpuAdamW::Loop {
  Loop(int64_t params, int threads) : shard(params) {
    worker = std::thread([this, threads] {
      const AdamWScalars s = Scalars();
      while (!stop.load(std::memory_order_relaxed)) {
        shard.Update(s, threads);
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  Shard shard;
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::thread worker;
};

BackgroundCpuAdamW::BackgroundCpuAdamW(int64_t params, int threads) : loop_(std::make_unique<Loop>(params, threads)) {}

BackgroundCpuAdamW::~BackgroundCpuAdamW() {
  loop_->stop = true;
  loop_->worker.join();
}

int BackgroundCpuAdamW::updates() const { return loop_->done.load(std::memory_order_relaxed); }

}  // namespace llmplan::executor
