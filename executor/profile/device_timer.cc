// SecondsPerCall and BurstSecondsPerCall (see device_timer.h).
#include "executor/profile/device_timer.h"

#include "executor/torch_compat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

namespace llmplan::executor {
namespace {

// One warm-up call, one trial call to size the batches to `budget`, then the
// timed batches, each after `idle_seconds` with nothing queued; seconds per
// call of the median batch.
double MedianBatchSecondsPerCall(const c10::Device& device, const std::function<void()>& call,
                                 const TimingBudget& budget, double idle_seconds) {
  call();
  compat::SynchronizeDevice(device);
  compat::StreamMark start, end;
  start.Record(device);
  call();
  end.Record(device);
  end.Synchronize();
  const double trial = std::max(end.SecondsSince(start), 1e-7);
  const int calls = static_cast<int>(
      std::clamp(std::ceil(budget.batch_seconds / trial), 1.0, static_cast<double>(budget.max_calls_per_batch)));
  std::vector<double> per_call;
  for (int b = 0; b < budget.batches; ++b) {
    if (idle_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
    start.Record(device);
    for (int i = 0; i < calls; ++i) call();
    end.Record(device);
    end.Synchronize();
    per_call.push_back(end.SecondsSince(start) / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

double SecondsPerCall(const c10::Device& device, const std::function<void()>& call, const TimingBudget& budget) {
  return MedianBatchSecondsPerCall(device, call, budget, /*idle_seconds=*/0);
}

double BurstSecondsPerCall(const c10::Device& device, const std::function<void()>& call, double burst_seconds,
                           int bursts, double idle_seconds) {
  const TimingBudget budget{burst_seconds, bursts, 1000};
  return MedianBatchSecondsPerCall(device, call, budget, device.is_cuda() ? idle_seconds : 0);
}

}  // namespace llmplan::executor
