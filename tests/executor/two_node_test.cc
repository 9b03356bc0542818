// Two "nodes" on one host: the four CPU ranks of a plan with two GPUs per
// node, started as torchrun starts them on two machines (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT) and as srun
// does (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID,
// SLURM_JOB_NODELIST), each process one rank with nothing above it. Every
// strategy, hybrid included (shard inside a node, replicate across), trains
// to the final weights of one process; a checkpoint of the two-node run
// resumes on one node; a rank killed on one node is named on the other. The
// run directory is written by rank 0 alone and the
// checkpoint directory by the ranks of the first shard group, as on a shared
// file system.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "executor/checkpoint/safetensors.h"
#include "executor/launcher/launcher.h"
#include "tests/cli_runner.h"
#include "tests/executor/gloo_skip.h"
#include "tests/executor/rank_processes.h"

extern char** environ;

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::RunLlmplan;

enum class Launcher { kTorchrun, kSlurm };

class TwoNodeTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 2, kPerNode = 2, kWorld = kNodes * kPerNode;

  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_two_node_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::vector<uint16_t> tokens(20'000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7 + i / 11) % 400);
    std::ofstream(Path("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A tiny-llama plan of `gpus` GPUs, two per node, 8 sequences of 64
  // tokens per step in micro-batches of 2.
  std::string MakePlan(const std::string& name, int gpus, const std::string& strategy) {
    CommandResult r = RunLlmplan("estimate --model tiny-llama --gpu cpu --gpus " + std::to_string(gpus) +
                                 " --gpus-per-node 2 --seq 64 --global-batch 8 --micro-batch 2 --strategy " + strategy +
                                 " -o " + Path(name));
    EXPECT_EQ(r.status, 0) << r.output;
    return Path(name);
  }

  // The run's command line for every rank.
  std::string RunArgs(const std::string& plan, const std::string& out, int steps, const std::string& extra = "") {
    return "run --plan " + plan + " --data " + Path("tokens.bin") + " --steps " + std::to_string(steps) + " --out " +
           Path(out) + " --cpu --dtype fp32 " + extra;
  }

  // Starts rank `rank` as `launcher` starts it on node rank / kPerNode.
  pid_t StartRank(Launcher launcher, int rank, int port, const std::string& args, const std::string& log) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string v = *e;
      // Neither launcher's variables from outside; each rank gets its own.
      if (v.rfind("RANK=", 0) == 0 || v.rfind("WORLD_SIZE=", 0) == 0 || v.rfind("SLURM_", 0) == 0) continue;
      env.push_back(v);
    }
    const int node = rank / kPerNode, local = rank % kPerNode;
    if (launcher == Launcher::kTorchrun) {
      env.insert(env.end(), {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(local),
                             "WORLD_SIZE=" + std::to_string(kWorld), "LOCAL_WORLD_SIZE=" + std::to_string(kPerNode),
                             "GROUP_RANK=" + std::to_string(node), "MASTER_ADDR=127.0.0.1"});
    } else {
      env.insert(env.end(), {"SLURM_PROCID=" + std::to_string(rank), "SLURM_LOCALID=" + std::to_string(local),
                             "SLURM_NTASKS=" + std::to_string(kWorld), "SLURM_NODEID=" + std::to_string(node),
                             "SLURM_TASKS_PER_NODE=" + std::to_string(kPerNode) + "(x2)",
                             "SLURM_JOB_NODELIST=localhost"});
    }
    env.push_back("MASTER_PORT=" + std::to_string(port));
    env.push_back("OMP_NUM_THREADS=1");  // four ranks share the host's cores
    std::vector<char*> envp;
    for (std::string& v : env) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string command = "exec " + std::string(LLMPLAN_BINARY) + " " + args;
    char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), command.data(), nullptr};
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve("/bin/sh", argv, envp.data());
      ::_exit(127);
    }
    ::close(fd);
    return pid;
  }

  // Runs the four ranks to their end; expects every one to exit 0.
  void RunTwoNodes(Launcher launcher, const std::string& args, const std::string& name) {
    const int port = executor::PickFreePort();
    const auto start = std::chrono::steady_clock::now();
    std::vector<pid_t> pids;
    for (int r = 0; r < kWorld; ++r) pids.push_back(StartRank(launcher, r, port, args, Log(name, r)));
    for (int r = 0; r < kWorld; ++r) {
      const executor_test::RankExit exit = executor_test::WaitRankProcess(pids[r], start, std::chrono::minutes(4));
      EXPECT_EQ(exit.exit_status, 0) << name << " rank " << r << ":\n" << executor_test::ReadText(Log(name, r));
    }
  }
  std::string Log(const std::string& name, int rank) const { return Path(name + ".rank" + std::to_string(rank) + ".log"); }

  static double MaxDifference(const std::string& a, const std::string& b) {
    const auto x = checkpoint::ReadSafetensors(a).tensors, y = checkpoint::ReadSafetensors(b).tensors;
    EXPECT_EQ(x.size(), y.size());
    double worst = 0;
    for (const auto& [name, t] : x) {
      if (!y.count(name)) {
        ADD_FAILURE() << name << " missing in " << b;
        continue;
      }
      worst = std::max(worst, (t.to(torch::kDouble) - y.at(name).to(torch::kDouble)).abs().max().item<double>());
    }
    return worst;
  }

  fs::path dir_;
};

TEST_F(TwoNodeTest, EveryStrategyOnTwoNodesEqualsOneProcess) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string one = MakePlan("one.json", 1, "no_shard");
  ASSERT_EQ(RunLlmplan(RunArgs(one, "one", 4)).status, 0);
  for (const std::string strategy : {"full_shard", "hybrid_shard", "shard_grad_op", "no_shard"}) {
    SCOPED_TRACE(strategy);
    const std::string plan = MakePlan(strategy + ".json", kWorld, strategy);
    RunTwoNodes(Launcher::kTorchrun, RunArgs(plan, strategy, 4), strategy);
    ASSERT_TRUE(fs::exists(Path(strategy + "/final.safetensors"))) << executor_test::ReadText(Log(strategy, 0));
    EXPECT_LT(MaxDifference(Path(strategy + "/final.safetensors"), Path("one/final.safetensors")), 1e-5);
    // Rank 0 alone reports: the others print no metrics path.
    for (int r = 1; r < kWorld; ++r)
      EXPECT_EQ(executor_test::ReadText(Log(strategy, r)).find("metrics.jsonl"), std::string::npos) << r;
  }
}

TEST_F(TwoNodeTest, SrunStartsTheSameRunAndItsCheckpointResumesOnOneNode) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string hybrid = MakePlan("hybrid.json", kWorld, "hybrid_shard");
  // Four steps straight, and two then two more from the checkpoint at step 2.
  RunTwoNodes(Launcher::kSlurm, RunArgs(hybrid, "straight", 4), "straight");
  RunTwoNodes(Launcher::kSlurm, RunArgs(hybrid, "first", 2, "--ckpt-dir " + Path("ckpt")), "first");
  ASSERT_TRUE(fs::exists(Path("ckpt/step-00000002/manifest.json"))) << executor_test::ReadText(Log("first", 0));
  // One node of two GPUs (two CPU ranks started by llmplan itself) continues it.
  const std::string one_node = MakePlan("one_node.json", 2, "full_shard");
  CommandResult resumed = RunLlmplan(RunArgs(one_node, "first", 4, "--cpu-ranks 2 --ckpt-dir " + Path("ckpt") + " --resume"));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step 4/4"), std::string::npos) << resumed.output;
  // Resharded from 4 ranks in two groups to one group of 2: the same values,
  // summed in another order.
  EXPECT_LT(MaxDifference(Path("first/final.safetensors"), Path("straight/final.safetensors")), 1e-5);
}

// A rank killed on node 1 (no launcher of llmplan's above it, as under
// torchrun on two machines) stops the ranks of node 0 within the collective
// timeout, and their error names it: they see only a closed connection, and
// the heartbeats in the rendezvous store say whose (peer_liveness.h).
TEST_F(TwoNodeTest, ARankKilledOnOneNodeIsNamedOnTheOther) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string plan = MakePlan("hybrid.json", kWorld, "hybrid_shard");
  const std::string args = RunArgs(plan, "killed", 100000, "--no-final-weights");
  const int port = executor::PickFreePort();
  const auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) pids.push_back(StartRank(Launcher::kTorchrun, r, port, args, Log("killed", r)));
  bool training = false;
  while (!training && std::chrono::steady_clock::now() - start < std::chrono::minutes(2)) {
    training = executor_test::ReadText(Log("killed", 0)).find("step 3/") != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(training) << executor_test::ReadText(Log("killed", 0));
  ASSERT_EQ(::kill(pids[3], SIGKILL), 0);  // rank 3: node 1, local rank 1
  const auto killed = std::chrono::steady_clock::now();
  for (int r = 0; r < kWorld; ++r) {
    const executor_test::RankExit exit = executor_test::WaitRankProcess(pids[r], killed, std::chrono::seconds(90));
    EXPECT_FALSE(exit.timed_out) << "rank " << r;
    if (r == 3) continue;
    EXPECT_NE(exit.exit_status, 0) << "rank " << r;
    // A negative status is the signal that ended it (-13: SIGPIPE, a write to the dead peer).
    const std::string log = executor_test::ReadText(Log("killed", r));
    EXPECT_NE(log.find("rank 3 (node 1) stopped: no heartbeat"), std::string::npos)
        << "rank " << r << " (exit status " << exit.exit_status << "):\n" << log;
  }
  // Rank 0's summary says why the run failed, the culprit included.
  const std::string summary = executor_test::ReadText(Path("killed/summary.json"));
  EXPECT_NE(summary.find("rank 3 (node 1) stopped"), std::string::npos) << summary;
}

}  // namespace
}  // namespace llmplan
