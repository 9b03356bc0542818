// ReservedMemory: what the CUDA caching allocator holds from the device — the
// memory that actually runs out — predicted by replaying the executor's
// allocations through a model of that allocator (planner/allocator_model.h):
// the start-up buffers in the order the executor makes them (flat units,
// AdamW state, RoPE tables), then two steps of the program's memory events in
// issue order, all on the compute stream (the executor allocates every tensor
// there, and frees a tensor a collective used only after the compute stream
// has waited for that collective, so no block waits on another stream).
//
// The segments the first step makes stay cached; the second step can still
// find a cached block split differently and add a segment (Llama-3-8B
// shard_grad_op on 2 GPUs: +2 GiB in step 2), after which steps repeat. The
// second step stops early where its state (every block and who holds it)
// equals the first step's at the same op: from there it would repeat the
// first exactly, so the figures are those of the whole step. How close they
// come to the caching allocator's own statistics: docs/results/README.md
// (accuracy rows); the known miss is a tied embedding under no_shard, where
// an op's allocations and frees interleave in a way the program's start/end
// events do not record.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan {

struct ReservedMemory {
  double peak_reserved = 0;    // highest over the start-up and the steps
  double peak_allocated = 0;   // the allocator's own count, for checking against MemoryTimeline
  std::vector<double> reserved_after;  // by op id, in the last step (empty when the replay stopped early)
  int64_t segments = 0;        // cudaMalloc'd segments held at the end
  // The replay stops at the first of these: either refuses the plan.
  int64_t retries = 0;         // cudaFree-everything-and-retry events (each stalls the device)
  bool out_of_memory = false;  // a request could not be met even after a retry
};

// `capacity_bytes`: what the allocator may reserve (0: unlimited).
ReservedMemory ReplayAllocator(const Plan& plan, const StepProgram& program, double capacity_bytes);

}  // namespace llmplan
