// StepRecorder: measures every operation of a step where it runs — the
// measured twin of the simulator's prediction, keyed by op id:
//   compute ops and copies  a mark (CUDA timing event) on the stream the op
//                           runs on, before and after it
//   collectives             the CollectiveWork's own span: events on its
//                           NCCL stream around the kernel, so time spent
//                           queued behind another collective is not its own
//   host work               the host clock (CPU AdamW; every op on a CPU device)
//   memory                  the allocator's statistics right after the host
//                           issued the op (the caching allocator's books change
//                           at issue, not when kernels run) and its peaks while
//                           the host issued it
// Times are seconds since the step's start, a mark the host waited for, so the
// device and host clocks start together.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "executor/comm/communicator.h"

namespace llmplan::compat {
class StreamMark;
}

namespace llmplan::executor {

struct OpMeasurement {
  bool measured = false;
  double start_s = 0, end_s = 0;  // since the step's start, where the op ran
  double issued_s = 0;            // host clock when the host had issued it
  int64_t allocated = 0, reserved = 0;            // after the op was issued
  int64_t peak_allocated = 0, peak_reserved = 0;  // while it was issued
};

struct StepMeasurement {
  std::vector<OpMeasurement> ops;  // indexed by StepOp::id
  int64_t peak_allocated = 0, peak_reserved = 0;  // over the step
  int peak_allocated_op = -1;  // the op during whose issue allocated memory peaked
  std::string memory_source;   // see compat::MemoryStats
  // The host's clock, since the step's start: when it had issued every op
  // (AllIssued), when its wait for the device returned and when it had read
  // every span (Finish), and when the step's Run returned. With the ops'
  // spans they say where a step's time beyond its ops goes.
  double all_issued_s = 0, synced_s = 0, read_s = 0, returned_s = 0;
};

class StepRecorder {
 public:
  enum class Where {
    kCurrentStream,  // the device's current stream (a copy stream under its guard)
    kHost,           // the host clock: work the host does itself
  };

  // REQUIRES: num_ops > 0.
  StepRecorder(const at::Device& device, int num_ops);
  ~StepRecorder();
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  // Marks the step's start on the compute stream and waits for it (the
  // previous step has finished by then, so this costs nothing).
  void BeginStep();
  const StepClock& clock() const { return clock_; }

  // Around the host's issue of op `op`: BeforeIssue resets the allocator's
  // peaks, AfterIssue reads its statistics.
  void BeforeIssue(int op);
  void AfterIssue(int op);

  // The op's span, measured `where` it runs.
  void Start(int op, Where where);
  void Stop(int op, Where where);
  // A collective's span comes from its work (read in Finish).
  void Collective(int op, std::shared_ptr<CollectiveWork> work);
  // Op `op` replayed from the step's CUDA graph (StepGraph): its span from
  // the marks its capture recorded into the graph, its memory that of the
  // capture (a replay allocates nothing; what the op's tensors hold is the
  // graph's pool, as the capture left it), issued when the graph was launched.
  // REQUIRES: `op` was recorded (Start/Stop) while the graph was captured.
  void Replayed(int op, const OpMeasurement& at_capture);
  // What this step measured of op `op` so far (its memory once issued).
  const OpMeasurement& Measured(int op) const { return current_.ops.at(op); }

  // The host has issued the step's last op.
  void AllIssued();
  // Seconds on the host clock since the step's start.
  double HostSeconds() const;
  // Waits for the device, resolves every span and returns the step's
  // measurements. REQUIRES: every collective passed to Collective finished.
  StepMeasurement Finish();

 private:
  struct Marks;
  at::Device device_;
  int num_ops_;
  StepClock clock_;
  std::unique_ptr<compat::StreamMark> step_start_;
  std::vector<Marks> marks_;
  std::vector<std::shared_ptr<CollectiveWork>> collectives_;
  StepMeasurement current_;
};

// The process's peak resident set size (what a CPU run reports as memory
// when LibTorch's CPU tensors cannot be counted).
int64_t ProcessPeakRssBytes();

}  // namespace llmplan::executor
