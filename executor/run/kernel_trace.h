// StepKernelTrace: `llmplan run --kernel-trace STEP` — LibTorch's Kineto
// profiler around one training step. Rank 0 writes kernel_trace.json into the
// run directory: the Chrome trace (every host op and, on a GPU, every kernel,
// copy and memset with its stream and CUPTI device timestamps), for Perfetto.
// What is made of it then is the caller's (llmplan run sums it up into
// kernel_profile.json with feedback/kernel_profile.h, a layer above this one).
//
// The profiler costs the host time per op, so the traced step's wall time
// is left out of the run's throughput means (its metrics line still says
// what it measured); its device times are CUPTI's and stay true.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace llmplan::executor {

// Called once the traced step's kernel_trace.json is whole: the step (from
// 1), the trace's path, and whether to print what it finds. What it throws
// is a warning: the run goes on.
using KernelTraceReader = std::function<void(int64_t step, const std::string& trace_path, bool progress)>;

class StepKernelTrace {
 public:
  // step: the step to trace, counted from 1 as the console and metrics.jsonl
  // count them (0: none). Only `writer` (rank 0 with a run directory) traces.
  // `reader` (may be empty) reads the trace once written.
  StepKernelTrace(int64_t step, std::string run_dir, bool writer, bool cuda, KernelTraceReader reader = {});

  // Whether optimizer step `step` (from 1) is the one traced here.
  bool Traces(int64_t step) const { return active_ && step == step_; }
  // Whether `step` is the traced one on any rank (so every rank leaves it out
  // of the throughput means alike).
  bool IsTracedStep(int64_t step) const { return step == step_; }
  // Before the step's first op. A profiler that cannot start (a LibTorch
  // without Kineto) is a warning, and Traces() is false from then on.
  // REQUIRES: Traces(step).
  void Begin(int64_t step);
  // After the device finished the step: writes kernel_trace.json and hands
  // it to the reader. A trace that cannot be written or read back is a
  // warning: the run goes on.
  // REQUIRES: Begin(step) was called and Traces(step) is still true.
  void End(int64_t step, bool progress);

 private:
  int64_t step_;
  std::string run_dir_;
  bool active_;
  bool cuda_;
  KernelTraceReader reader_;
};

}  // namespace llmplan::executor
