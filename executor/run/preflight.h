// Preflight: checks of a plan against the machine it is about to run on, made
// before anything is allocated, so a run that cannot work fails in one line
// instead of deep inside LibTorch minutes later.
//
// The host's memory: what this node's ranks will hold there, by the
// planner's models, against what the kernel says is available
// (MemAvailable):
//   - on a CPU device every rank's tensors live in host memory: the memory
//     model's peak (the step program replayed: parameters, gradients,
//     optimizer state, activations at their peak) per rank;
//   - offloaded state and its staging (StepProgram::host) per rank;
//   - with --ckpt-async, the checkpoint staging buffers: 12 bytes per
//     element of a shard on each rank of the first shard group
//     (CheckpointStagingBytesPerRank, planner/memory_model.h).
#pragma once

#include <c10/core/Device.h>

#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan::executor {

// The bytes one rank's tensors are predicted to hold at the step's peak (the
// memory model's allocated peak for `program`).
double PredictedRankPeakBytes(const StepProgram& program);

// What one node's ranks of a run hold in host memory.
struct HostMemoryNeed {
  double per_rank = 0;            // each rank's tensors and offloaded state on the host
  int ranks = 1;                  // the run's ranks on the node
  double checkpoint_staging = 0;  // the node's --ckpt-async buffers, all its staging ranks together
  int staging_ranks = 0;          // the node's ranks that stage (those of the first shard group)
  double Total() const { return per_rank * ranks + checkpoint_staging; }
};

// The host memory of `ranks_on_node` ranks running `program` on one node:
// on a CPU device (`cpu_device`) the step's predicted peak, on any device
// program.host, per rank; plus the checkpoint staging of
// `staging_ranks_on_node` ranks (0 without --ckpt-async).
// REQUIRES: ranks_on_node >= 1, 0 <= staging_ranks_on_node <= ranks_on_node.
HostMemoryNeed PredictHostMemory(const StepProgram& program, bool cpu_device, int ranks_on_node,
                                 int staging_ranks_on_node);

// REQUIRES: plan is valid. Throws UserError when need.Total() is above
// available_bytes (> 0; 0 means unknown: no judgement), in one line that says
// what to change, e.g.
//   the plan needs 37.2 GiB of host memory per rank (the planner's memory model)
//   x 2 ranks = 74.4 GiB, but this host has 21.9 GiB available (MemAvailable);
//   plan again with the same pins and a smaller micro-batch: llmplan estimate ...
// or, when the checkpoint staging is what does not fit,
//   --ckpt-async stages 48.0 GiB of checkpoint state in host memory (12 bytes per
//   parameter of each of 1 rank's shard), but this host has 40.0 GiB available
//   (MemAvailable); drop --ckpt-async (each save then pauses training while it
//   writes), or shard the state over more GPUs: llmplan estimate ... --ckpt-async
void CheckHostMemory(const Plan& plan, const HostMemoryNeed& need, double available_bytes);

// CheckHostMemory of a CPU run's `ranks_on_node` ranks without checkpoint
// staging (PredictHostMemory(program, true, ranks_on_node, 0)).
void CheckHostMemory(const Plan& plan, const StepProgram& program, int ranks_on_node, double available_bytes);

// The ranks of one node that stage --ckpt-async checkpoints: those of the
// first shard group (ranks 0..shard_group_size-1) among the node's
// local_world_size ranks, rank - local_rank being its first. 0 without
// ckpt_async. REQUIRES: 0 <= local_rank <= rank, local_world_size >= 1.
int CheckpointStagingRanksOnNode(bool ckpt_async, int shard_group_size, int rank, int local_rank, int local_world_size);

// For `llmplan run`, before anything is allocated: CheckHostMemory with the
// run's step program and /proc/meminfo's MemAvailable. `staging_ranks_on_node`: this
// node's ranks that stage --ckpt-async checkpoints (0 without it). The
// device's own memory is not judged here (on a GPU the out-of-memory message
// does it, out_of_memory.h).
// REQUIRES: plan is valid, program built from it, ranks_on_node >= 1,
// 0 <= staging_ranks_on_node <= ranks_on_node. Throws UserError as above.
void CheckPlanFitsHost(const Plan& plan, const StepProgram& program, const at::Device& device, int ranks_on_node,
                       int staging_ranks_on_node = 0);

// NVMe offload (the plan's OptimizerStateOnNvme()): `dir` was given, is a
// directory, and its filesystem has room for the AdamW state files of the
// node's `ranks_on_node` ranks (program.host.nvme_state each; free space
// as statvfs reports it to this user).
// REQUIRES: ranks_on_node >= 1. Throws UserError in one line
// that says what is missing, e.g.
//   --nvme-dir /scratch has 20.1 GiB free, but 2 ranks' AdamW state needs 23.4 GiB
//   (11.7 GiB each); free space there, give another directory, or plan for more GPUs
void CheckNvmeDirectory(const StepProgram& program, const std::string& dir, int ranks_on_node);

}  // namespace llmplan::executor
