#include "executor/step/step_recorder.h"

#include <sys/resource.h>

#include <algorithm>

#include "executor/torch_compat.h"

namespace llmplan::executor {

int64_t ProcessPeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

struct StepRecorder::Marks {
  compat::StreamMark start, stop;
  bool on_host = false;
  std::chrono::steady_clock::time_point host_start, host_stop;
};

StepRecorder::StepRecorder(const at::Device& device, int num_ops)
    : device_(device),
      num_ops_(num_ops),
      step_start_(std::make_unique<compat::StreamMark>()),
      marks_(static_cast<size_t>(num_ops)),
      collectives_(static_cast<size_t>(num_ops)) {}

StepRecorder::~StepRecorder() = default;

void StepRecorder::BeginStep() {
  current_ = StepMeasurement{};
  current_.ops.assign(static_cast<size_t>(num_ops_), OpMeasurement{});
  std::fill(collectives_.begin(), collectives_.end(), nullptr);
  step_start_->Record(device_);
  step_start_->Synchronize();
  clock_.host_start = std::chrono::steady_clock::now();
  clock_.device_start_event = step_start_->cuda_event();
}

void StepRecorder::BeforeIssue(int op) {
  (void)op;
  compat::ResetMemoryPeaks(device_);
}

void StepRecorder::AfterIssue(int op) {
  const compat::MemoryStats m = compat::ReadMemoryStats(device_, ProcessPeakRssBytes());
  OpMeasurement& o = current_.ops.at(op);
  o.issued_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_.host_start).count();
  o.allocated = m.allocated;
  o.reserved = m.reserved;
  o.peak_allocated = m.peak_allocated;
  o.peak_reserved = m.peak_reserved;
  current_.memory_source = m.source;
  if (m.peak_allocated > current_.peak_allocated) {
    current_.peak_allocated = m.peak_allocated;
    current_.peak_allocated_op = op;
  }
  current_.peak_reserved = std::max(current_.peak_reserved, m.peak_reserved);
}

void StepRecorder::Start(int op, Where where) {
  Marks& m = marks_.at(op);
  m.on_host = where == Where::kHost || !device_.is_cuda();
  if (m.on_host) m.host_start = std::chrono::steady_clock::now();
  else m.start.Record(device_);
}

void StepRecorder::Stop(int op, Where where) {
  (void)where;
  Marks& m = marks_.at(op);
  if (m.on_host) m.host_stop = std::chrono::steady_clock::now();
  else m.stop.Record(device_);
  current_.ops.at(op).measured = true;
}

void StepRecorder::Collective(int op, std::shared_ptr<CollectiveWork> work) {
  collectives_.at(op) = std::move(work);
  current_.ops.at(op).measured = true;
}

void StepRecorder::Replayed(int op, const OpMeasurement& at_capture) {
  OpMeasurement& o = current_.ops.at(op);
  o = at_capture;
  o.measured = true;
  o.issued_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_.host_start).count();
  if (o.peak_allocated > current_.peak_allocated) {
    current_.peak_allocated = o.peak_allocated;
    current_.peak_allocated_op = op;
  }
  current_.peak_reserved = std::max(current_.peak_reserved, o.peak_reserved);
}

double StepRecorder::HostSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_.host_start).count();
}

void StepRecorder::AllIssued() {
  current_.all_issued_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_.host_start).count();
}

StepMeasurement StepRecorder::Finish() {
  compat::SynchronizeDevice(device_);  // every mark and collective event has completed
  auto since_start = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t - clock_.host_start).count();
  };
  current_.synced_s = since_start(std::chrono::steady_clock::now());
  for (int op = 0; op < num_ops_; ++op) {
    OpMeasurement& o = current_.ops[op];
    if (!o.measured) continue;
    if (collectives_[op] != nullptr) {
      const CollectiveSpan span = collectives_[op]->Span(clock_);
      o.start_s = span.start_s;
      o.end_s = span.end_s;
      continue;
    }
    const Marks& m = marks_[op];
    if (m.on_host) {
      o.start_s = since_start(m.host_start);
      o.end_s = since_start(m.host_stop);
    } else {
      // Complete since the device synchronisation above: no per-event wait
      // (the device idles while the host reads these, ~140 ops a step).
      o.start_s = m.start.SecondsSince(*step_start_);
      o.end_s = m.stop.SecondsSince(*step_start_);
    }
  }
  std::fill(collectives_.begin(), collectives_.end(), nullptr);
  current_.read_s = since_start(std::chrono::steady_clock::now());
  return std::move(current_);
}

}  // namespace llmplan::executor
