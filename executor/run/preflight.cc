// Preflight checks (see preflight.h).
#include "executor/run/preflight.h"

#include <algorithm>
#include <filesystem>

#include "executor/hardware/direct_file.h"
#include "executor/hardware/host_info.h"
#include "base/format.h"
#include "planner/memory_model.h"
#include "planner/memory_timeline.h"
#include "planner/replan_advice.h"
#include "base/user_error.h"

namespace llmplan::executor {

double PredictedRankPeakBytes(const StepProgram& program) { return ReplayMemory(program).peak; }

HostMemoryNeed PredictHostMemory(const StepProgram& program, bool cpu_device, int ranks_on_node,
                                 int staging_ranks_on_node) {
  HostMemoryNeed need;
  // BuildStepProgram leaves host.checkpoint_staging 0; it is counted below,
  // by the ranks that actually stage.
  need.per_rank = (cpu_device ? PredictedRankPeakBytes(program) : 0) + program.host.Total() -
                  program.host.checkpoint_staging;
  need.ranks = ranks_on_node;
  need.staging_ranks = staging_ranks_on_node;
  need.checkpoint_staging = staging_ranks_on_node * CheckpointStagingBytesPerRank(program);
  return need;
}

void CheckHostMemory(const Plan& plan, const HostMemoryNeed& need, double available_bytes) {
  const double needed = need.Total();
  if (available_bytes <= 0 || needed <= available_bytes) return;  // 0: /proc/meminfo unreadable, no judgement
  std::string what;
  if (need.per_rank > 0) {
    what = "the plan needs " + FormatBytes(need.per_rank) + " of host memory per rank (the planner's memory model)";
    if (need.ranks > 1) what += " x " + std::to_string(need.ranks) + " ranks = " + FormatBytes(need.per_rank * need.ranks);
  }
  if (need.checkpoint_staging > 0) {
    what += std::string(what.empty() ? "" : ", and ") + "--ckpt-async stages " + FormatBytes(need.checkpoint_staging) +
            " of checkpoint state in host memory (12 bytes per parameter of each of " +
            std::to_string(need.staging_ranks) + " rank" + (need.staging_ranks > 1 ? "s'" : "'s") + " shard" +
            (need.staging_ranks > 1 ? "s" : "") + ")";
    if (need.per_rank > 0) what += ": " + FormatBytes(needed) + " in all";
  }
  // Without the staging it would fit: dropping --ckpt-async is the change.
  const bool staging_is_the_excess = need.checkpoint_staging > 0 && needed - need.checkpoint_staging <= available_bytes;
  const std::string advice =
      staging_is_the_excess
          ? "drop --ckpt-async (each save then pauses training while it writes), or plan for more GPUs so each "
            "shard is smaller (llmplan estimate --ckpt-async --gpus auto)"
          : RePlanAdvice(plan, /*gpu_memory=*/false);
  throw UserError(what + ", but this host has " + FormatBytes(available_bytes) + " available (MemAvailable); " + advice);
}

void CheckHostMemory(const Plan& plan, const StepProgram& program, int ranks_on_node, double available_bytes) {
  CheckHostMemory(plan, PredictHostMemory(program, /*cpu_device=*/true, ranks_on_node, 0), available_bytes);
}

int CheckpointStagingRanksOnNode(bool ckpt_async, int shard_group_size, int rank, int local_rank, int local_world_size) {
  if (!ckpt_async) return 0;
  const int node_first_rank = rank - local_rank;
  return std::clamp(shard_group_size - node_first_rank, 0, local_world_size);
}

void CheckPlanFitsHost(const Plan& plan, const StepProgram& program, const at::Device& device, int ranks_on_node,
                       int staging_ranks_on_node) {
  // A GPU run without offload or staging keeps nothing of the plan's on the host.
  if (!device.is_cpu() && plan.offload == Offload::kNone && staging_ranks_on_node == 0) return;
  CheckHostMemory(plan, PredictHostMemory(program, device.is_cpu(), ranks_on_node, staging_ranks_on_node),
                  ReadHostInfo().available_bytes);
}

void CheckNvmeDirectory(const StepProgram& program, const std::string& dir, int ranks_on_node) {
  if (dir.empty())
    throw UserError("the plan keeps AdamW's state on NVMe (offload_to nvme): give a directory on a local SSD with "
                    "--nvme-dir DIR");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw UserError("--nvme-dir " + dir + " is not a directory" + (ec ? " (" + ec.message() + ")" : std::string()));
  const double each = program.host.nvme_state;
  const double needed = each * ranks_on_node;
  const int64_t free = FreeDiskBytes(dir);
  if (free >= 0 && needed > static_cast<double>(free))
    throw UserError("--nvme-dir " + dir + " has " + FormatBytes(static_cast<double>(free)) + " free, but " +
                    (ranks_on_node > 1 ? std::to_string(ranks_on_node) + " ranks' AdamW state needs " +
                                             FormatBytes(needed) + " (" + FormatBytes(each) + " each)"
                                       : "the AdamW state needs " + FormatBytes(needed)) +
                    "; free space there, give another directory, or plan for more GPUs");
}

}  // namespace llmplan::executor
