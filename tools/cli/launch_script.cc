#include "tools/cli/launch_script.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "base/format.h"
#include "base/user_error.h"

namespace llmplan::cli {

namespace {

// `arg` as a POSIX shell reads it back: bare when it is only safe characters.
std::string Quoted(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                          std::string::npos)
    return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string Joined(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    if (!out.empty()) out += ' ';
    out += Quoted(a);
  }
  return out;
}

// Slurm's --time: D-HH:MM:SS.
std::string SlurmTime(double seconds) {
  const long long s = static_cast<long long>(std::ceil(seconds));
  char text[48];
  std::snprintf(text, sizeof text, "%lld-%02lld:%02lld:%02lld", s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
  return text;
}

}  // namespace

std::string LaunchScript(const LaunchRequest& r) {
  const Plan& plan = r.plan;
  const int per_node = plan.GpusOnNode();
  if (plan.gpus % per_node != 0)
    throw UserError("the plan's " + std::to_string(plan.gpus) + " GPUs do not fill nodes of " +
                    std::to_string(plan.gpus_per_node) + ": torchrun and srun start as many processes on every "
                    "node; plan for a multiple of " + std::to_string(plan.gpus_per_node) + " GPUs");
  const int nodes = plan.gpus / per_node;
  const std::string command = Joined({r.executable}) + " " + Joined(r.run_args);
  std::ostringstream out;

  out << "# llmplan run --print-launch: " << plan.model.name << " on " << nodes << " node(s) x " << per_node
      << " GPU(s), " << StrategyName(plan.strategy) << "\n";
  double wall_s = 0;
  if (r.predicted_step_s > 0) {
    // The steps as predicted, 10% for their spread, and 15 minutes for
    // start-up, the checkpoints and the final weights.
    wall_s = static_cast<double>(r.steps) * r.predicted_step_s * 1.1 + 900;
    out << "# predicted: " << FormatSeconds(r.predicted_step_s) << " a step, " << r.steps << " steps, "
        << FormatSeconds(static_cast<double>(r.steps) * r.predicted_step_s) << "\n";
  }
  out << "# Every node must see the plan, the token file, --out and --ckpt-dir at the same paths (a shared\n"
      << "# file system); node 0 (" << r.master_addr << ") holds the rendezvous on port " << r.master_port << ".\n\n";

  out << "# torchrun: one command per node, node 0's first\n";
  for (int node = 0; node < nodes; ++node)
    out << "NCCL_NVLS_ENABLE=0 torchrun --nnodes " << nodes << " --node-rank " << node << " --nproc-per-node "
        << per_node << " --master-addr " << Quoted(r.master_addr) << " --master-port " << r.master_port
        << " --no-python " << command << "\n";

  out << "\n# Slurm: save what follows as llmplan.sbatch, then `sbatch llmplan.sbatch`\n"
      << "#!/bin/bash\n"
      << "#SBATCH --job-name=llmplan-" << plan.model.name << "\n"
      << "#SBATCH --nodes=" << nodes << "\n"
      << "#SBATCH --ntasks-per-node=" << per_node << "\n"
      << "#SBATCH --gpus-per-node=" << per_node << "\n";
  if (wall_s > 0) out << "#SBATCH --time=" << SlurmTime(wall_s) << "\n";
  out << "# NVLink multicast off: its buffers take device memory the plan does not count.\n"
      << "export NCCL_NVLS_ENABLE=0\n"
      << "# llmplan reads its place from SLURM_PROCID, SLURM_LOCALID and SLURM_NODEID, and takes the\n"
      << "# first host of SLURM_JOB_NODELIST for the rendezvous.\n"
      << "export MASTER_PORT=" << r.master_port << "\n"
      << "srun --kill-on-bad-exit=1 " << command << "\n";
  return out.str();
}

}  // namespace llmplan::cli
