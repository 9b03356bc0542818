// SecondsPerCall (see device_timer.h).
#include "executor/profile/device_timer.h"

#include "executor/torch_compat.h"

#include <algorithm>
#include <cmath>
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

}  // namespace llmplan::executor
