// EvaluatePlan: the one way a plan's cost is computed — build its step
// program, simulate it, and turn the result into an Estimate. `estimate`,
// `simulate` and the plan search all call it, so they agree to the byte and
// the microsecond.
#pragma once

#include "planner/estimate.h"
#include "planner/memory_timeline.h"
#include "planner/step_program.h"
#include "simulator/reserved_memory.h"
#include "simulator/simulator.h"

namespace llmplan {

// What a run adds to its plan's costs, when the caller knows how it will
// run (llmplan estimate's and simulate's run flags).
struct EvaluateOptions {
  // llmplan run --ckpt-async: the host figure includes the checkpoint
  // staging buffers (planner/memory_model.h, CheckpointStagingBytesPerGpu).
  bool ckpt_async = false;
};

struct Evaluation {
  StepProgram program;
  SimulationResult simulation;  // time
  MemoryTimeline memory;        // allocated memory, in issue order (what the allocator sees)
  ReservedMemory reserved;      // what the allocator holds (CUDA devices; empty on a CPU)
  Estimate estimate;
};

// REQUIRES: plan.Validate() passes.
Evaluation EvaluatePlanInDetail(const Plan& plan, const HardwareProfile& profile, bool record_timeline = false,
                                const EvaluateOptions& evaluate = {});
Estimate EvaluatePlan(const Plan& plan, const HardwareProfile& profile, const EvaluateOptions& evaluate = {});
// EvaluatePlan of a program already built for the plan (BuildStepProgram or
// BuildEvaluatedProgram): `llmplan run` predicts the very program it runs.
// REQUIRES: program was built from plan and profile.
Estimate EvaluateProgram(const Plan& plan, const HardwareProfile& profile, const StepProgram& program);

// The step program of `plan` with what `evaluate` adds to it (the host's
// checkpoint staging); `op_names` as BuildStepProgram's.
// REQUIRES: plan.Validate() passes.
StepProgram BuildEvaluatedProgram(const Plan& plan, const HardwareProfile& profile, const EvaluateOptions& evaluate,
                                  bool op_names = true);

// Pinned host memory one GPU's process may use: the plan's per-node figure
// shared by the job's GPUs on the node, else the profile's per-GPU figure.
double HostCapacityPerGpu(const Plan& plan, const HardwareProfile& profile);

// The allocator replay (simulator/reserved_memory.h) on a CUDA device, when
// the plan's allocated bytes alone leave it a chance to fit; empty otherwise
// (the Estimate then reports reserved = allocated, a lower bound).
ReservedMemory ReplayAllocatorIfItCanFit(const Plan& plan, const HardwareProfile& profile, const StepProgram& program,
                                         const MemoryTimeline& memory);

// Bytes the CUDA caching allocator may take on one GPU: the device's memory
// less the CUDA context and the communicators' buffers, which live outside it.
double AllocatorCapacity(const HardwareProfile& profile, const StepProgram& program);

// The Estimate of an already simulated program (used by EvaluatePlan):
// time from the simulation, allocated memory from the issue-order replay,
// reserved memory from the allocator replay (CUDA; on a CPU reserved =
// allocated).
Estimate EstimateFromSimulation(const Plan& plan, const HardwareProfile& profile, const StepProgram& program,
                                const SimulationResult& sim, const MemoryTimeline& memory,
                                const ReservedMemory& reserved);

}  // namespace llmplan
