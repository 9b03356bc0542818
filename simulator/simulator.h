// Simulator: a discrete-event interpreter of a StepProgram. Streams (compute,
// all-gather, reduce, host->device, device->host, CPU) each run one operation
// at a time in program order; an operation starts when its stream is free and
// its dependencies have finished; durations come from the CostModel.
//
// Contention: compute runs slower by the profile's
// compute_slowdown_during_collectives while any collective runs beside it
// (NCCL kernels take SMs and HBM bandwidth), a collective slower by
// collective_slowdown_during_compute while compute runs beside it (the same
// sharing seen from NCCL's side), the CPU AdamW slower by
// cpu_adam_slowdown_during_copies while a host<->device copy runs (the
// copy's DMA takes host memory bandwidth the update is bound by), and when
// the profile says the two copy directions share one link, each runs at
// half speed while both run.
//
// Ranks are symmetric, so one simulation stands for every GPU: simulating a
// step costs the same for 8 GPUs or 4,096.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/step_program.h"
#include "planner/step_trace.h"  // OpTiming, MemorySample (the simulator's memory: transient bytes above the persistent)

namespace llmplan {

struct SimulationOptions {
  bool record_timeline = false;  // keep every memory change (for traces); off in the search
  // Follow the op-stream allocations over time (peak_transient_bytes,
  // peak_time, at_peak). Off in the search, whose Estimate takes memory from
  // the issue-order replay (planner/memory_timeline.h): reading every memory
  // event was half of a simulation. Needed by record_timeline.
  bool track_memory = true;
};

struct SimulationResult {
  double step_seconds = 0;
  std::array<double, kNumStreams> busy_seconds{};  // per StreamKind
  // Time during which a collective or copy runs while the compute stream has
  // nothing it can run: communication that prefetching failed to hide.
  double exposed_communication_seconds = 0;
  std::vector<OpTiming> ops;  // indexed by StepOp::id
  double start_of(int op) const { return ops.at(op).start; }

  // With track_memory (otherwise 0):
  double peak_transient_bytes = 0;  // max over time of the op-stream allocations
  double peak_time = 0;
  std::array<double, kNumMemoryCategories> at_peak{};  // per MemoryCategory at that moment
  std::vector<MemorySample> timeline;                  // when record_timeline
};

// REQUIRES: every op's id is its index in `program.ops` (as the builder numbers
// them), and every dependency of an op precedes it there.
// Throws std::logic_error if the program deadlocks (a builder bug).
SimulationResult Simulate(const StepProgram& program, const CostModel& cost, const SimulationOptions& options = {});

}  // namespace llmplan
