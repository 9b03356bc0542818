// RankSetup: the first phase of a run on one rank — where it runs, what the
// machine must hold for it, its run directory, the checkpoint it resumes from
// and its communicators — checked and made before any model state exists, so
// a run that cannot work fails in one line before anything is allocated.
#pragma once

#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "executor/comm/collective_watchdog.h"
#include "executor/comm/distributed_env.h"
#include "executor/comm/peer_liveness.h"
#include "executor/comm/process_groups.h"
#include "executor/run/run_directory.h"
#include "executor/run/trainer.h"
#include "executor/step/step_interpreter.h"

namespace llmplan::executor {

struct RankSetup {
  DistributedEnv env;
  at::Device device{at::kCPU};  // cuda:LOCAL_RANK for "cuda" when several ranks share a node
  bool rank0 = true;
  std::unique_ptr<RunDirectoryLock> run_dir_lock;   // rank 0's, when the run has a directory
  std::unique_ptr<RunDirectoryLock> ckpt_dir_lock;  // rank 0's: two runs never share a --ckpt-dir
  std::string resume_path;                         // the checkpoint to continue from ("": none)
  // Declared before the watchdog, which watches them: destroyed after it.
  ProcessGroups groups;
  std::unique_ptr<CollectiveWatchdog> watchdog;
  std::unique_ptr<PeerLiveness> liveness;  // heartbeats: who died, when a collective fails (null on one process)
  StepComms comms;  // all null on one process
};

// Reads this process's place in the job (torchrun/Slurm variables) and its
// device; checks the plan against it (world size, host memory, the NVMe
// directory); makes the rank's GPU current; checks and locks rank 0's run
// directory; finds the checkpoint to resume from and removes a crash's
// partial ones. Throws UserError for each check that fails.
RankSetup PrepareRank(const TrainConfig& config);

// Connects the ranks' shard, replica and world groups (NCCL on CUDA, Gloo
// on the CPU) and checks that every group answers, then watches them. On one
// process: nothing to connect. Also starts counting CPU tensors on a CPU run
// (so it reports the bytes its tensors hold, as the caching allocator does
// on a GPU). REQUIRES: PrepareRank made `rank`.
void ConnectRanks(const TrainConfig& config, RankSetup& rank);

}  // namespace llmplan::executor
