// StepGraph: the captured ops of a step (StepProgram::cuda_graph) held as one
// CUDA graph — recorded once while the host issues them, then launched as a
// whole every later step, so the host issues one launch instead of every
// kernel, and the kernels follow each other without waiting on the host.
//
// What a replay needs, which the caller (StepInterpreter) provides: every
// tensor the captured kernels read or write stays where it was at the
// capture (the step's tokens are copied into the same buffers, tensors made
// during the capture and read after it are kept), and nothing the host
// decides inside the captured ops changes from step to step (shapes, which
// ops run: the program's). Allocations made during the capture come from a
// private pool of the caching allocator that only this graph uses; freed
// blocks are reused inside the capture, as in an ordinary step, and the
// pool is held until the graph is destroyed (the memory model prices it:
// simulator/reserved_memory.h).
//
// Compiled only with CUDA (step_graph_cuda.cc).
#pragma once

#include <functional>
#include <memory>

#include <c10/core/Device.h>

namespace llmplan::executor {

class StepGraph {
 public:
  // REQUIRES: `device` is a CUDA device.
  explicit StepGraph(const at::Device& device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Runs `issue` on a side stream (a graph cannot be captured on the default
  // stream) that first waits for the current stream's work, capturing every
  // kernel it launches into the graph; nothing runs yet. An exception from
  // `issue` ends the capture and is rethrown, the graph left empty; one from
  // the capture itself (a kernel CUDA cannot capture, a host sync inside
  // `issue`) becomes a UserError that says to plan without the graph.
  // REQUIRES: !captured(); `issue` launches work only on the current stream
  // (and waits on nothing recorded before the capture).
  void Capture(const std::function<void()>& issue);
  bool captured() const;

  // Launches the graph on the current stream: every captured kernel again,
  // in the capture's order, on the same memory. REQUIRES: captured().
  void Replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmplan::executor
