// SecondsPerCall (see device_timer.h).
#include "executor/profile/device_timer.h"

#include "executor/torch_compat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

namespace llmplan::executor {

double SecondsPerCall(const c10::Device& device, const std::function<void()>& call, const TimingBudget& budget) {
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
    start.Record(device);
    for (int i = 0; i < calls; ++i) call();
    end.Record(device);
    end.Synchronize();
    per_call.push_back(end.SecondsSince(start) / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

double BurstSecondsPerCall(const c10::Device& device, const std::function<void()>& call, double burst_seconds,
                           int bursts, double idle_seconds) {
  if (!device.is_cuda()) return SecondsPerCall(device, call, TimingBudget{burst_seconds, bursts, 1000});
  call();
  compat::SynchronizeDevice(device);
  compat::StreamMark start, end;
  start.Record(device);
  call();
  end.Record(device);
  end.Synchronize();
  const double trial = std::max(end.SecondsSince(start), 1e-7);
  const int calls = static_cast<int>(std::clamp(std::ceil(burst_seconds / trial), 1.0, 1000.0));
  std::vector<double> per_call;
  for (int b = 0; b < bursts; ++b) {
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
    start.Record(device);
    for (int i = 0; i < calls; ++i) call();
    end.Record(device);
    end.Synchronize();
    per_call.push_back(end.SecondsSince(start) / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace llmplan::executor
