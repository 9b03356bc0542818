// StepKernelTrace: `llmplan run --kernel-trace STEP` — LibTorch's Kineto
// profiler around one training step. Rank 0 writes, into the run directory:
//   kernel_trace.json    the Chrome trace (every host op and, on a GPU, every
//                        kernel, copy and memset with its stream and CUPTI
//                        device timestamps): open it in Perfetto
//   kernel_profile.json  the trace summed up by feedback/kernel_profile.h
//                        (device busy and idle time, time per kernel class,
//                        the most expensive kernels)
// and prints the summary. The same summary of any trace, a PyTorch peer's
// included, is `llmplan kernels TRACE`.
//
// The profiler costs the host time per op, so the traced step's wall time
// is left out of the run's throughput means (its metrics line still says
// what it measured); its device times are CUPTI's and stay true.
#pragma once

#include <cstdint>
#include <string>

namespace llmplan::executor {

class StepKernelTrace {
 public:
  // step: the step to trace, counted from 1 as the console and metrics.jsonl
  // count them (0: none). Only `writer` (rank 0 with a run directory) traces.
  StepKernelTrace(int64_t step, std::string run_dir, bool writer, bool cuda);

  // Whether optimizer step `step` (from 1) is the one traced here.
  bool Traces(int64_t step) const { return active_ && step == step_; }
  // Whether `step` is the traced one on any rank (so every rank leaves it out
  // of the throughput means alike).
  bool IsTracedStep(int64_t step) const { return step == step_; }
  // Before the step's first op. A profiler that cannot start (a LibTorch
  // without Kineto) is a warning, and Traces() is false from then on.
  // REQUIRES: Traces(step).
  void Begin(int64_t step);
  // After the device finished the step: writes both files and prints the
  // summary to stderr when `progress`. A trace that cannot be written or
  // read back is a warning: the run goes on.
  // REQUIRES: Begin(step) was called and Traces(step) is still true.
  void End(int64_t step, bool progress);

 private:
  int64_t step_;
  std::string run_dir_;
  bool active_;
  bool cuda_;
};

}  // namespace llmplan::executor
