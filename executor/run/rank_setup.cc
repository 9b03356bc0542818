#include "executor/run/rank_setup.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include <torch/cuda.h>

#include "base/user_error.h"
#include "executor/checkpoint/checkpoint_store.h"
#include "executor/run/preflight.h"
#include "executor/torch_compat.h"

#ifdef LLMPLAN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace llmplan::executor {

namespace {

// "cuda" (and "cuda:0" when several ranks share the node, as `llmplan run`
// passes it) means this rank's GPU: cuda:LOCAL_RANK.
at::Device ParseDevice(std::string name, const DistributedEnv& env) {
  if (env.local_world_size > 1 && (name == "cuda" || name == "cuda:0")) name = "cuda:" + std::to_string(env.local_rank);
  if (name == "cpu") return at::Device(at::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available())
      throw UserError("no CUDA GPU is available to this process (LibTorch " + compat::TorchVersion() +
                      (torch::cuda::device_count() == 0 ? ", 0 devices" : "") + "): pass --cpu to train on the CPU");
    at::Device d(name);
    if (d.has_index() && d.index() >= static_cast<int>(torch::cuda::device_count()))
      throw UserError("device " + name + " does not exist: " + std::to_string(torch::cuda::device_count()) +
                      " CUDA device(s) visible");
    return d.has_index() ? d : at::Device(at::kCUDA, 0);
  }
  throw UserError("unknown device '" + name + "': use cpu or cuda[:N]");
}

}  // namespace

RankSetup PrepareRank(const TrainConfig& config) {
  const Plan& plan = config.plan;
  RankSetup rank;
  rank.env = ReadDistributedEnv();
  const DistributedEnv& env = rank.env;
  if (env.world_size != plan.gpus)
    throw UserError("the plan is for " + std::to_string(plan.gpus) + " GPU(s) but " + std::to_string(env.world_size) +
                    " process(es) were started (" + env.source + "): start one process per GPU of the plan, or make "
                    "the plan with llmplan estimate --gpus " + std::to_string(env.world_size));
  rank.device = ParseDevice(config.device, env);
  // What this node's ranks put in host memory (a CPU run's tensors, offloaded
  // state, --ckpt-async's staging) must fit in MemAvailable.
  CheckPlanFitsHost(plan, config.program, rank.device, env.local_world_size,
                    CheckpointStagingRanksOnNode(config.ckpt_async && !config.ckpt_dir.empty(), plan.shard_group_size,
                                                 env.rank, env.local_rank, env.local_world_size));
  // And the AdamW state files of the node's ranks must fit on the SSD.
  if (plan.OptimizerStateOnNvme()) CheckNvmeDirectory(config.program, config.nvme_dir, env.local_world_size);
#ifdef LLMPLAN_WITH_CUDA
  // Make this rank's GPU the thread's current device before any CUDA work
  // (NCCL init, streams, events, kernels): code that takes "the current
  // stream" without a device index otherwise runs on cuda:0 on every rank,
  // e.g. rank 1 launching its AdamW kernel and timing events on GPU 0.
  if (rank.device.is_cuda()) c10::cuda::set_device(rank.device.index());
#endif
  rank.rank0 = env.rank == 0;
  // The run directory is rank 0's: checked and locked before anything is
  // written, so an earlier run is never overwritten by accident.
  if (rank.rank0 && !config.run_dir.empty()) {
    CheckRunDirectory(config.run_dir, config.run_dir_mode);
    rank.run_dir_lock = std::make_unique<RunDirectoryLock>(config.run_dir);
  }
  // The checkpoint directory too: two runs saving into one would interleave
  // their checkpoints, and a later --resume would continue the other's. One
  // that cannot be created is left to the saves, which warn and train on.
  if (rank.rank0 && !config.ckpt_dir.empty()) {
    std::error_code ec;
    const bool same_as_out = !config.run_dir.empty() && std::filesystem::exists(config.ckpt_dir, ec) &&
                             std::filesystem::equivalent(config.ckpt_dir, config.run_dir, ec);
    std::filesystem::create_directories(config.ckpt_dir, ec);
    if (!same_as_out && std::filesystem::is_directory(config.ckpt_dir, ec))
      rank.ckpt_dir_lock = std::make_unique<RunDirectoryLock>(config.ckpt_dir, "--ckpt-dir");
  }
  // Checkpoints: which one to resume from is decided from the directory
  // alone (every rank sees the same complete checkpoints; rank 0 removes a
  // crash's partial ones before the first collective, so before any rank can
  // start a save; complete ones are pruned only after the next save).
  rank.resume_path = config.resume_from;
  if (config.resume && rank.resume_path.empty()) {
    if (config.ckpt_dir.empty()) throw UserError("--resume needs --ckpt-dir (where the checkpoints are)");
    rank.resume_path = checkpoint::CheckpointStore(config.ckpt_dir).Newest().value_or("");
    if (rank.resume_path.empty() && rank.rank0 && config.progress)
      std::cout << "no checkpoint in " << config.ckpt_dir << " yet: starting at step 0" << std::endl;
  }
  if (rank.rank0 && !config.ckpt_dir.empty()) checkpoint::CheckpointStore(config.ckpt_dir).RemovePartials();
  return rank;
}

namespace {

// Test hook: LLMPLAN_TEST_CONNECT_DELAY=RANK:SECONDS makes that rank wait
// before it connects, so a test can signal the job while the other ranks
// wait for it at the rendezvous.
void TestConnectDelay(int rank) {
  const char* text = std::getenv("LLMPLAN_TEST_CONNECT_DELAY");
  int delayed_rank = -1, seconds = 0;
  if (text != nullptr && std::sscanf(text, "%d:%d", &delayed_rank, &seconds) == 2 && delayed_rank == rank)
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
}

}  // namespace

void ConnectRanks(const TrainConfig& config, RankSetup& rank) {
  // CPU tensors are counted from here on, so a CPU run reports the bytes its
  // tensors hold (as the caching allocator does on a GPU), not the RSS.
  if (!rank.device.is_cuda()) compat::InstallCpuTensorCounter();
  if (rank.env.world_size <= 1) return;
  TestConnectDelay(rank.env.rank);
  const auto timeout = CollectiveTimeoutFromEnv(std::chrono::seconds(300));
  rank.groups = ConnectProcessGroups(rank.env, config.plan.shard_group_size, /*use_nccl=*/rank.device.is_cuda(),
                                     rank.device, timeout);
  HealthCheck(rank.groups);  // every group answers before any training
  rank.watchdog = std::make_unique<CollectiveWatchdog>(rank.env.rank, timeout, rank.groups.All());
  rank.liveness = std::make_unique<PeerLiveness>(rank.env, timeout);
  rank.comms = StepComms{rank.groups.shard.get(), rank.groups.shard_reduce.get(), rank.groups.replica.get(),
                         rank.groups.world.get(), rank.watchdog.get()};
}

}  // namespace llmplan::executor
