// What `llmplan run --print-launch` prints: the commands that start a run on
// its nodes — one torchrun command per node, and a Slurm batch script — so a
// multi-node plan is started exactly as llmplan reads its place
// (executor/comm/distributed_env.h). Nothing is started. No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "planner/plan.h"

namespace llmplan::cli {

struct LaunchRequest {
  Plan plan;
  std::string executable;            // absolute path of the binary every node runs
  std::vector<std::string> run_args;  // "run" and its arguments, paths absolute, --print-launch left out
  std::string master_addr;           // node 0's host name: the rendezvous
  int master_port = 29500;
  int64_t steps = 0;                 // --steps (the run's total)
  double predicted_step_s = 0;       // the plan's predicted step (0: unknown; no --time then)
};

// The text: a header (nodes, GPUs, predicted time, what must be shared),
// the torchrun command of each node, and the sbatch script (nodes, tasks and
// GPUs per node, a --time from the prediction with a margin, the NCCL
// settings llmplan relies on, srun of the same command). Arguments are
// quoted for a POSIX shell where they need it.
// REQUIRES: plan.gpus is 1 or a multiple of plan.GpusOnNode() (Plan::Validate).
std::string LaunchScript(const LaunchRequest& request);

}  // namespace llmplan::cli
