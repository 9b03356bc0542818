// The host memory of asynchronous checkpoints (llmplan run --ckpt-async) in
// the executor: the preflight counts it before anything is allocated and
// refuses, in one line that says what to change, a run whose host would not
// hold it; summary.json reports what rank 0 staged, which is what the
// planner's CheckpointStagingBytesPerRank predicts (through the built
// binary on CPU ranks).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "executor/run/preflight.h"
#include "planner/estimate.h"
#include "planner/hardware_profile.h"
#include "planner/memory_model.h"
#include "planner/plan.h"
#include "planner/program_builder.h"
#include "tests/cli_runner.h"
#include "tests/executor/gloo_skip.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;

Plan TinyPlan(int gpus, Offload offload = Offload::kNone) {
  Plan plan;
  plan.model = PresetModel("tiny-llama");
  plan.profile = "cpu";
  plan.gpus = gpus;
  plan.strategy = gpus > 1 ? ShardingStrategy::kFullShard : ShardingStrategy::kNoShard;
  plan.offload = offload;
  NormaliseGrouping(plan);
  plan.seq_len = 64;
  plan.micro_batch = 2;
  plan.Validate();
  return plan;
}

std::string CaughtMessage(const Plan& plan, const executor::HostMemoryNeed& need, double available) {
  try {
    executor::CheckHostMemory(plan, need, available);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointStagingPreflightTest, StagingRanksAreTheFirstShardGroupsOnThisNode) {
  using executor::CheckpointStagingRanksOnNode;
  EXPECT_EQ(CheckpointStagingRanksOnNode(false, 8, 0, 0, 8), 0) << "without --ckpt-async";
  EXPECT_EQ(CheckpointStagingRanksOnNode(true, 8, 3, 3, 8), 8) << "full_shard on one node: every rank";
  EXPECT_EQ(CheckpointStagingRanksOnNode(true, 1, 5, 5, 8), 1) << "no_shard: rank 0 alone";
  EXPECT_EQ(CheckpointStagingRanksOnNode(true, 1, 9, 1, 8), 0) << "no_shard, the second node";
  EXPECT_EQ(CheckpointStagingRanksOnNode(true, 16, 12, 4, 8), 8) << "a 16-GPU shard group's second node";
  EXPECT_EQ(CheckpointStagingRanksOnNode(true, 12, 8, 0, 8), 4) << "12 of 16: the second node holds ranks 8..11";
  EXPECT_EQ(CheckpointStagingRanksOnNode(true, 2, 20, 4, 8), 0) << "hybrid_shard(2): the third node stages nothing";
}

TEST(CheckpointStagingPreflightTest, HostMemoryNeedCountsTheStagingOfTheNodesStagingRanks) {
  const Plan plan = TinyPlan(2);
  const StepProgram program = BuildStepProgram(plan, LoadHardwareProfile("cpu"));
  const double per_rank = executor::PredictedRankPeakBytes(program);
  const double staging = CheckpointStagingBytesPerRank(program);
  // tiny-llama's units are all of even size: each rank owns half of each.
  EXPECT_DOUBLE_EQ(staging, 12.0 * static_cast<double>(plan.model.TotalParams()) / 2);
  const executor::HostMemoryNeed cpu = executor::PredictHostMemory(program, /*cpu_device=*/true, 2, 2);
  EXPECT_DOUBLE_EQ(cpu.per_rank, per_rank);
  EXPECT_DOUBLE_EQ(cpu.checkpoint_staging, 2 * staging);
  EXPECT_DOUBLE_EQ(cpu.Total(), 2 * per_rank + 2 * staging);
  // On a GPU without offload only the staging is on the host.
  const executor::HostMemoryNeed gpu = executor::PredictHostMemory(program, /*cpu_device=*/false, 2, 2);
  EXPECT_EQ(gpu.per_rank, 0);
  EXPECT_DOUBLE_EQ(gpu.Total(), 2 * staging);
  // With the optimizer offloaded, its pinned state is on the host too.
  const Plan offloaded = TinyPlan(2, Offload::kOptimizer);
  const StepProgram offloaded_program = BuildStepProgram(offloaded, LoadHardwareProfile("cpu"));
  const executor::HostMemoryNeed gpu_offload =
      executor::PredictHostMemory(offloaded_program, /*cpu_device=*/false, 2, 0);
  EXPECT_DOUBLE_EQ(gpu_offload.per_rank, offloaded_program.host.Total());
  EXPECT_GT(gpu_offload.per_rank, 0);
}

TEST(CheckpointStagingPreflightTest, AHostThatCannotHoldTheStagingIsRefusedInOneLineThatSaysWhatToChange) {
  const Plan plan = TinyPlan(2);
  const StepProgram program = BuildStepProgram(plan, LoadHardwareProfile("cpu"));
  const executor::HostMemoryNeed need = executor::PredictHostMemory(program, true, 2, 2);
  const double without_staging = need.per_rank * need.ranks;
  EXPECT_EQ(CaughtMessage(plan, need, need.Total() * 1.01), "") << "it fits";
  EXPECT_EQ(CaughtMessage(plan, need, 0), "") << "MemAvailable unknown: no judgement";

  // Room for the training state, not for the staging: drop --ckpt-async.
  const std::string staging = CaughtMessage(plan, need, (without_staging + need.Total()) / 2);
  EXPECT_EQ(staging.find('\n'), std::string::npos) << staging;
  EXPECT_EQ(staging.rfind("the plan needs ", 0), 0u) << staging;
  EXPECT_NE(staging.find(" x 2 ranks = " + FormatBytes(without_staging) + ", and --ckpt-async stages " +
                         FormatBytes(need.checkpoint_staging) +
                         " of checkpoint state in host memory (12 bytes per parameter of each of 2 ranks' shards): " +
                         FormatBytes(need.Total()) + " in all, but this host has "),
            std::string::npos)
      << staging;
  EXPECT_NE(staging.find("available (MemAvailable); drop --ckpt-async (each save then pauses training while it "
                         "writes), or plan for more GPUs"),
            std::string::npos)
      << staging;
  // Not even room for the training state: plan again, as without staging.
  const std::string plan_again = CaughtMessage(plan, need, without_staging / 2);
  EXPECT_NE(plan_again.find("; plan again with the same pins and a smaller micro-batch: llmplan estimate"),
            std::string::npos)
      << plan_again;

  // A GPU run (nothing else of the plan on the host): the staging alone.
  const executor::HostMemoryNeed gpu = executor::PredictHostMemory(program, false, 1, 1);
  const std::string alone = CaughtMessage(plan, gpu, gpu.Total() / 2);
  EXPECT_EQ(alone.rfind("--ckpt-async stages " + FormatBytes(gpu.checkpoint_staging) +
                            " of checkpoint state in host memory (12 bytes per parameter of each of 1 rank's shard), "
                            "but this host has ",
                        0),
            0u)
      << alone;
  EXPECT_NE(alone.find("drop --ckpt-async"), std::string::npos) << alone;
}

class CheckpointStagingRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_ckpt_staging_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::vector<uint16_t> tokens(20'000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 200);
    std::ofstream(Path("tokens.u16"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs `plan` with --ckpt-async and returns its summary.json.
  nlohmann::json RunAsync(const Plan& plan, const std::string& name) {
    const std::string plan_path = Path(name + ".plan.json");
    SavePlan(plan, plan_path);
    const executor_test::CommandResult r = executor_test::RunLlmplan(
        "run --cpu --cpu-ranks " + std::to_string(plan.gpus) + " --plan " + plan_path + " --data " +
        Path("tokens.u16") + " --steps 4 --out " + Path(name) + " --ckpt-dir " + Path(name + "_ckpt") +
        " --ckpt-every 2 --ckpt-async --no-final-weights");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(" staged for asynchronous checkpoints"), std::string::npos) << r.output;
    return nlohmann::json::parse(std::ifstream(Path(name) + "/summary.json"));
  }

  fs::path dir_;
};

TEST_F(CheckpointStagingRunTest, SummaryReportsTheStagingThePlannerPredicts) {
  for (const int gpus : {1, 2}) {
    SCOPED_TRACE(std::to_string(gpus) + " rank(s)");
    if (gpus > 1) LLMPLAN_SKIP_WITHOUT_GLOO();
    const Plan plan = TinyPlan(gpus);
    const nlohmann::json summary = RunAsync(plan, "run" + std::to_string(gpus));
    const StepProgram program = BuildStepProgram(plan, LoadHardwareProfile("cpu"));
    EXPECT_EQ(summary["checkpoint_staging_bytes"].get<double>(),
              CheckpointStagingBytesPerRank(program))
        << summary.dump(1);
    EXPECT_EQ(summary["status"], "completed");
    EXPECT_EQ(summary["last_checkpoint"], Path("run" + std::to_string(gpus) + "_ckpt") + "/step-00000004");
  }
  // One rank stages the whole model: 12 bytes per parameter.
  EXPECT_EQ(CheckpointStagingBytesPerRank(BuildStepProgram(TinyPlan(1), LoadHardwareProfile("cpu"))),
            12.0 * static_cast<double>(PresetModel("tiny-llama").TotalParams()));
}

}  // namespace
}  // namespace llmplan
