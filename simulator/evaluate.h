// EvaluatePlan: the one way a plan's cost is computed — build its step
// program, simulate it, and turn the result into an Estimate. `estimate`,
// `simulate` and the plan search all call it, so they agree to the byte and
// the microsecond.
#pragma once

#include "planner/estimate.h"
#include "planner/memory_timeline.h"
#include "planner/step_program.h"
#include "simulator/simulator.h"

namespace llmplan {

struct Evaluation {
  StepProgram program;
  SimulationResult simulation;  // time
  MemoryTimeline memory;        // memory, in issue order (what the allocator sees)
  Estimate estimate;
};

// REQUIRES: plan.Validate() passes.
Evaluation EvaluatePlanInDetail(const Plan& plan, const HardwareProfile& profile, bool record_timeline = false);
Estimate EvaluatePlan(const Plan& plan, const HardwareProfile& profile);

// Pinned host memory one GPU's process may use: the plan's per-node figure
// shared by the job's GPUs on the node, else the profile's per-GPU figure.
double HostCapacityPerGpu(const Plan& plan, const HardwareProfile& profile);

// The Estimate of an already simulated program (used by EvaluatePlan):
// time from the simulation, memory from the issue-order replay.
Estimate EstimateFromSimulation(const Plan& plan, const HardwareProfile& profile, const StepProgram& program,
                                const SimulationResult& sim, const MemoryTimeline& memory);

}  // namespace llmplan
