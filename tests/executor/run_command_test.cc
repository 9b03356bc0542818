// `llmplan run` end to end through the built binary on CPU: a plan from
// `llmplan estimate --gpu cpu`, real text from `llmplan data prepare`, a short
// run whose loss falls; two ranks, launched by llmplan or started as torchrun
// starts them; and one-line errors with exit status 2.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cli_runner.h"
#include "tests/executor/run_test_support.h"
#include "tests/executor/rank_processes.h"
#include "tests/executor/gloo_skip.h"
#include <nlohmann/json.hpp>

#include "executor/launcher/launcher.h"
#include "feedback/measured_run.h"
#include "planner/plan.h"

namespace llmplan {
namespace {

using executor_test::CommandResult;
using executor_test::RunLlmplan;

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("llmplan_run_command_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A tiny-llama plan for the CPU and a token file of real English text (the
  // GPL and Apache licence texts every Debian system carries; else this
  // source tree's own design document).
  void MakePlanAndData() {
    CommandResult plan = RunLlmplan("estimate --model tiny-llama --gpus 1 --gpu cpu --seq 128 --micro-batch 4 "
                                    "--grad-accum 2 --checkpoint-layers 0,2 --lr 5e-3 --warmup-steps 5 -o " +
                                    Path("plan.json"));
    ASSERT_EQ(plan.status, 0) << plan.output;
    std::string texts;
    for (const char* f : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"})
      if (std::filesystem::exists(f)) texts += std::string(" ") + f;
    if (texts.empty()) texts = " " + std::string(LLMPLAN_SOURCE_DIR) + "/README.md";
    CommandResult data = RunLlmplan("data prepare -o " + Path("text.bin") + texts);
    ASSERT_EQ(data.status, 0) << data.output;
  }

  // The error cases need no real text: a plan saved from C++ and a raw
  // uint16 token file, so each test launches the (LibTorch-loading) binary
  // only for the command under test.
  void MakeQuickPlanAndData(uint16_t odd_token = 65) {
    Plan plan = executor_test::TinyCpuPlan(1);
    SavePlan(plan, Path("plan.json"));
    std::vector<uint16_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 200);
    tokens[1000] = odd_token;
    std::ofstream(Path("text.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }

  // A 2-rank full_shard plan of tiny-llama for the CPU (with the quick data).
  void MakeTwoRankPlan() {
    CommandResult plan = RunLlmplan("estimate --model tiny-llama --gpus 2 --gpu cpu --seq 64 --global-batch 4 "
                                    "--strategy full_shard -o " + Path("plan2.json"));
    ASSERT_EQ(plan.status, 0) << plan.output;
  }

  std::filesystem::path dir_;
};

// Starts `llmplan <args>` as rank `rank` of `world`, with the variables
// torchrun sets, output to `log`. The environment is built before fork: the
// child only execs.
pid_t StartTorchrunRank(const std::string& args, int rank, int world, int port, const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const std::string& name : {"RANK", "LOCAL_RANK"}) env.push_back(name + "=" + std::to_string(rank));
  for (const std::string& name : {"WORLD_SIZE", "LOCAL_WORLD_SIZE"}) env.push_back(name + "=" + std::to_string(world));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back("MASTER_PORT=" + std::to_string(port));
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string command = std::string(LLMPLAN_BINARY) + " " + args;
  char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), command.data(), nullptr};
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execve("/bin/sh", argv, envp.data());
    ::_exit(127);
  }
  ::close(log_fd);
  return pid;
}

TEST_F(RunCommandTest, TrainsOnRealTextAndLossFalls) {
  MakePlanAndData();
  CommandResult run = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("text.bin") +
                                 " --steps 40 --out " + Path("run") + " --cpu --dtype bf16");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("step 40/40"), std::string::npos) << run.output;
  auto summary = nlohmann::json::parse(std::ifstream(Path("run/summary.json")));
  const double first = summary["first_loss"], last = summary["final_loss"];
  // Byte-level English: from ln(512) = 6.2 to the unigram/bigram regime.
  EXPECT_GT(first, 5.5);
  EXPECT_LT(last, 3.6) << run.output;
  EXPECT_EQ(summary["device"], "cpu");
  EXPECT_TRUE(std::filesystem::exists(Path("run/metrics.jsonl")));
}

TEST_F(RunCommandTest, LaunchesOneRankPerCpuRank) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // llmplan execs llmplan-executor, whose launcher starts the ranks.
  MakeQuickPlanAndData();
  MakeTwoRankPlan();
  CommandResult run = RunLlmplan("run --plan " + Path("plan2.json") + " --data " + Path("text.bin") +
                                 " --steps 2 --out " + Path("run2") + " --cpu --cpu-ranks 2 --no-final-weights");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_TRUE(std::filesystem::exists(Path("run2/summary.json"))) << run.output;
}

TEST_F(RunCommandTest, RunsAsTheRankTorchrunStarted) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // `torchrun --no-python --nproc-per-node 2 llmplan run ...`: torchrun's
  // variables pass through llmplan's exec, so each process trains as its rank.
  MakeQuickPlanAndData();
  MakeTwoRankPlan();
  const std::string args = "run --plan " + Path("plan2.json") + " --data " + Path("text.bin") + " --steps 2 --out " +
                           Path("torchrun") + " --cpu --no-final-weights";
  const int port = executor::PickFreePort();
  const auto start = std::chrono::steady_clock::now();
  const pid_t rank0 = StartTorchrunRank(args, 0, 2, port, Path("rank0.log"));
  const pid_t rank1 = StartTorchrunRank(args, 1, 2, port, Path("rank1.log"));
  const executor_test::RankExit exit0 = executor_test::WaitRankProcess(rank0, start, std::chrono::minutes(3));
  const executor_test::RankExit exit1 = executor_test::WaitRankProcess(rank1, start, std::chrono::minutes(3));
  EXPECT_EQ(exit0.exit_status, 0) << executor_test::ReadText(Path("rank0.log"));
  EXPECT_EQ(exit1.exit_status, 0) << executor_test::ReadText(Path("rank1.log"));
  EXPECT_TRUE(std::filesystem::exists(Path("torchrun/summary.json"))) << executor_test::ReadText(Path("rank0.log"));
  // Rank 1 reports nothing; had the variables been lost, it would have been
  // a launcher of its own, whose rank 0 names its metrics.jsonl.
  EXPECT_EQ(executor_test::ReadText(Path("rank1.log")).find("metrics.jsonl"), std::string::npos)
      << executor_test::ReadText(Path("rank1.log"));
}

TEST_F(RunCommandTest, BadInputIsOneLineWithStatus2) {
  MakeQuickPlanAndData();
  CommandResult missing = RunLlmplan("run --plan " + Path("nope.json") + " --data " + Path("text.bin") +
                                     " --steps 1 --out " + Path("r") + " --cpu");
  EXPECT_EQ(missing.status, 2) << missing.output;
  CommandResult dtype = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("text.bin") +
                                   " --steps 1 --out " + Path("r") + " --cpu --dtype fp16");
  EXPECT_EQ(dtype.status, 2) << dtype.output;
  EXPECT_NE(dtype.output.find("bf16 or fp32"), std::string::npos) << dtype.output;
  CommandResult no_data = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("missing.bin") +
                                     " --steps 1 --out " + Path("r") + " --cpu");
  EXPECT_EQ(no_data.status, 2) << no_data.output;
  CommandResult steps = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("text.bin") +
                                   " --steps 0 --out " + Path("r") + " --cpu");
  EXPECT_EQ(steps.status, 2) << steps.output;
  // Numbers that are not numbers, or out of range: NaN passes a range check
  // written with < and >, and would reach the optimizer or the cost report.
  for (const std::string& flag : {"--lr nan", "--lr -0.1", "--lr 1", "--price nan", "--price -1", "--ckpt-every -1"}) {
    CommandResult bad = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("text.bin") +
                                   " --steps 1 --out " + Path("r") + " --cpu " + flag);
    EXPECT_EQ(bad.status, 2) << flag << ": " << bad.output;
    EXPECT_EQ(executor_test::LlmplanErrorLines(bad.output).size(), 1u) << flag << ": " << bad.output;
    EXPECT_NE(bad.output.find(flag.substr(0, flag.find(' '))), std::string::npos) << flag << ": " << bad.output;
    EXPECT_LT(bad.output.size(), 300u) << flag << ": " << bad.output;
    EXPECT_FALSE(std::filesystem::exists(Path("r"))) << flag << ": nothing is written for bad input";
  }
}

TEST_F(RunCommandTest, KernelTraceOfOneStepIsLeftOutOfTheMeansAndBadStepsAreRefused) {
  MakeQuickPlanAndData();
  CommandResult run = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("text.bin") +
                                 " --steps 3 --kernel-trace 2 --out " + Path("traced") + " --cpu --no-final-weights");
  ASSERT_EQ(run.status, 0) << run.output;
  // Three steps, the first warming up and the second traced: the means are step 3's alone.
  const nlohmann::json summary = nlohmann::json::parse(executor_test::ReadText(Path("traced/summary.json")));
  EXPECT_EQ(summary["steps"].get<int>(), 3);
  std::istringstream lines(executor_test::ReadText(Path("traced/metrics.jsonl")));
  std::string line, last;
  std::vector<bool> traced;
  while (std::getline(lines, line))
    if (!line.empty()) {
      last = line;
      traced.push_back(nlohmann::json::parse(line)["kernel_traced"].get<bool>());
    }
  EXPECT_EQ(traced, (std::vector<bool>{false, true, false})) << "the metrics line says which step was traced";
  EXPECT_DOUBLE_EQ(summary["mean_tokens_per_s_per_gpu"].get<double>(),
                   nlohmann::json::parse(last)["tokens_per_s_per_gpu"].get<double>());
  // `llmplan compare` and `calibrate` leave it out as the run's means do, and say so.
  EXPECT_EQ(LoadMeasuredRun(Path("traced")).TimedSteps().size(), 1u);
  CommandResult compared = RunLlmplan("compare --run " + Path("traced"));
  EXPECT_EQ(compared.status, 0) << compared.output;
  EXPECT_NE(compared.output.find("3 steps, 1 timed (step 2 kernel-traced, left out)"), std::string::npos)
      << compared.output;
  if (run.output.find("without Kineto") != std::string::npos) {
    // Debian's CPU LibTorch 1.13 records but cannot save a trace: one warning
    // line and the run goes on. (The CUDA wheels have Kineto: the file checks
    // below run there, and KernelTraceGpuTest checks the kernels.)
    EXPECT_FALSE(std::filesystem::exists(Path("traced/kernel_trace.json")));
  } else {
    EXPECT_NE(run.output.find("kernel trace of step 2"), std::string::npos) << run.output;
    const nlohmann::json trace = nlohmann::json::parse(executor_test::ReadText(Path("traced/kernel_trace.json")));
    ASSERT_TRUE(trace.contains("traceEvents")) << trace.dump().substr(0, 300);
    const nlohmann::json profile = nlohmann::json::parse(executor_test::ReadText(Path("traced/kernel_profile.json")));
    EXPECT_EQ(profile["step"].get<int>(), 2);
    CommandResult kernels = RunLlmplan("kernels " + Path("traced/kernel_trace.json"));
    EXPECT_EQ(kernels.status, 0) << kernels.output;
  }
  // A step the run does not reach is refused before anything starts.
  CommandResult late = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("text.bin") +
                                  " --steps 3 --kernel-trace 4 --out " + Path("late") + " --cpu");
  EXPECT_EQ(late.status, 2) << late.output;
  EXPECT_NE(late.output.find("--kernel-trace 4 is after the last step"), std::string::npos) << late.output;
  EXPECT_FALSE(std::filesystem::exists(Path("late/metrics.jsonl")));
  CommandResult not_a_trace = RunLlmplan("kernels " + Path("plan.json"));
  EXPECT_EQ(not_a_trace.status, 2) << not_a_trace.output;
  EXPECT_NE(not_a_trace.output.find("not a Chrome trace"), std::string::npos) << not_a_trace.output;
}

TEST_F(RunCommandTest, TokenIdBeyondVocabularyIsOneLineError) {
  // Raw uint16 (nanoGPT layout): 600 is beyond tiny-llama's 512-token
  // vocabulary; 40 steps x 2 samples read every one of the 63 windows.
  MakeQuickPlanAndData(600);
  CommandResult run = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("text.bin") +
                                 " --steps 40 --out " + Path("r") + " --cpu");
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_NE(run.output.find("600"), std::string::npos) << run.output;
}

TEST_F(RunCommandTest, WithoutCpuFlagNeedsAGpu) {
  MakeQuickPlanAndData();
  CommandResult run = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("text.bin") +
                                 " --steps 1 --out " + Path("r"));
  if (run.status == 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_NE(run.output.find("no CUDA GPU"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--cpu"), std::string::npos) << run.output;
}

// --print-launch for a two-node plan: a torchrun command per node (node
// ranks 0 and 1, the same rendezvous, the same absolute paths) and an sbatch
// script for 2 nodes of 8 GPUs with a --time from the prediction; nothing
// is started or written.
TEST_F(RunCommandTest, PrintLaunchGivesATorchrunCommandPerNodeAndAnSbatchScript) {
  CommandResult plan = RunLlmplan("estimate --model llama3-8b --gpus 16 --gpu h100-sxm-80g --seq 8192 "
                                  "--global-batch 256 -o " + Path("p16.json"));
  ASSERT_EQ(plan.status, 0) << plan.output;
  const std::string args = "run --plan " + Path("p16.json") + " --data " + Path("text.bin") + " --steps 1000 --out " +
                           Path("multi") + " --ckpt-dir " + Path("ckpt") + " --ckpt-every 100";
  CommandResult r = RunLlmplan(args + " --print-launch --master-addr node-a");
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.output);
  std::vector<std::string> torchrun, sbatch;
  bool in_script = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("NCCL_NVLS_ENABLE=0 torchrun ", 0) == 0) torchrun.push_back(line);
    if (line == "#!/bin/bash") in_script = true;
    if (in_script) sbatch.push_back(line);
  }
  ASSERT_EQ(torchrun.size(), 2u) << r.output;
  const std::string tail = " --nproc-per-node 8 --master-addr node-a --master-port 29500 --no-python ";
  const std::string same = " run --plan " + Path("p16.json") + " --data " + Path("text.bin") + " --steps 1000 --out " +
                           Path("multi") + " --ckpt-dir " + Path("ckpt") + " --ckpt-every 100";
  for (int node = 0; node < 2; ++node) {
    EXPECT_NE(torchrun[node].find("--nnodes 2 --node-rank " + std::to_string(node) + tail), std::string::npos)
        << torchrun[node];
    EXPECT_NE(torchrun[node].find(same), std::string::npos) << torchrun[node];
    EXPECT_EQ(torchrun[node].find("--print-launch"), std::string::npos) << torchrun[node];
  }
  const std::string script = r.output.substr(r.output.find("#!/bin/bash"));
  for (const char* expected : {"#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=8\n", "#SBATCH --gpus-per-node=8\n",
                               "#SBATCH --time=0-", "export NCCL_NVLS_ENABLE=0\n", "srun --kill-on-bad-exit=1 "})
    EXPECT_NE(script.find(expected), std::string::npos) << expected << "\n" << script;
  EXPECT_NE(script.find(same + "\n"), std::string::npos) << script;
  EXPECT_FALSE(std::filesystem::exists(Path("multi")));
  EXPECT_FALSE(std::filesystem::exists(Path("ckpt")));

  // Nodes that the plan does not fill, and --master-addr alone, are one line each.
  CommandResult uneven_plan = RunLlmplan("estimate --model tiny-llama --gpus 12 --gpu h100-sxm-80g --seq 64 "
                                         "--global-batch 12 -o " + Path("p12.json"));
  ASSERT_EQ(uneven_plan.status, 0) << uneven_plan.output;
  CommandResult uneven = RunLlmplan("run --plan " + Path("p12.json") + " --data " + Path("text.bin") +
                                    " --steps 10 --out " + Path("u") + " --print-launch");
  EXPECT_EQ(uneven.status, 2) << uneven.output;
  EXPECT_NE(uneven.output.find("do not fill nodes of 8"), std::string::npos) << uneven.output;
  CommandResult alone = RunLlmplan(args + " --master-addr node-a");
  EXPECT_EQ(alone.status, 2) << alone.output;
  EXPECT_NE(alone.output.find("--master-addr goes with --print-launch"), std::string::npos) << alone.output;
}

}  // namespace
}  // namespace llmplan
