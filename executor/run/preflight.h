// Preflight: checks of a plan against the machine it is about to run on, made
// before anything is allocated, so a run that cannot work fails in one line
// instead of deep inside LibTorch minutes later.
//
// Today one check: a CPU run's predicted memory against the host's. On the CPU
// every rank's tensors live in host memory, so the planner's memory model (the
// step program replayed: parameters, gradients, optimizer state, activations
// at their peak) times the ranks on this node must fit in what the kernel says
// is available (MemAvailable).
#pragma once

#include <c10/core/Device.h>

#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan::executor {

// The bytes one rank's tensors are predicted to hold at the step's peak (the
// memory model's allocated peak for `program`).
double PredictedRankPeakBytes(const StepProgram& program);

// REQUIRES: plan is valid, ranks_on_node >= 1. Throws UserError when
// ranks_on_node x the predicted peak of plan's step program is above
// available_bytes, e.g.
//   the plan needs 37.2 GiB of host memory per rank (the planner's memory model)
//   x 2 ranks = 74.4 GiB, but this host has 21.9 GiB available (MemAvailable);
//   plan again with the same pins and a smaller micro-batch: llmplan estimate ...
// (one line).
void CheckHostMemory(const Plan& plan, const StepProgram& program, int ranks_on_node, double available_bytes);

// For `llmplan run`: on a CPU device, CheckHostMemory with the plan's step
// program (built with the plan's profile, or defaults when it is not here) and
// /proc/meminfo's MemAvailable; on a GPU, nothing (the device's memory is
// checked by the out-of-memory message, out_of_memory.h).
// REQUIRES: plan is valid, ranks_on_node >= 1. Throws UserError as above.
void CheckPlanFitsHost(const Plan& plan, const at::Device& device, int ranks_on_node);

}  // namespace llmplan::executor
