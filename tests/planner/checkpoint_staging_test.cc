// The host memory of asynchronous checkpoints (llmplan run --ckpt-async) in
// the planner: 12 bytes per element of rank 0's shard, shared by the GPUs of
// the node that holds the first shard group, and counted in the host figure
// that `estimate --ckpt-async` judges a plan by. (That the executor stages
// exactly this many bytes: tests/executor/checkpoint_staging_test.cc.)
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/memory_model.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::Profile;

Plan MakePlan(int gpus, ShardingStrategy strategy, int group, Offload offload) {
  Plan p;
  p.model = PresetModel("llama3-8b");
  p.profile = "h100-sxm-80g";
  p.gpus = gpus;
  p.gpus_per_node = 8;
  p.strategy = strategy;
  p.shard_group_size = group;
  p.offload = offload;
  p.seq_len = 4096;
  p.micro_batch = 1;
  p.grad_accum = 1;
  NormaliseGrouping(p);
  p.Validate();
  return p;
}

TEST(CheckpointStagingTest, TwelveBytesPerElementOfRankZerosShard) {
  const HardwareProfile h100 = Profile("h100-sxm-80g");
  // Llama-3-8B's units all divide by 8 (memory_model_test.cc), so the shard
  // is exactly N / 8: 1,003,782,656 elements.
  const Plan full = MakePlan(8, ShardingStrategy::kFullShard, 0, Offload::kNone);
  const StepProgram program = BuildStepProgram(full, h100);
  EXPECT_DOUBLE_EQ(CheckpointStagingBytesPerRank(program), 12 * 1'003'782'656.0);
  // Every GPU of the node stages its own shard: the per-GPU share is the same.
  EXPECT_DOUBLE_EQ(CheckpointStagingBytesPerGpu(full, program), 12 * 1'003'782'656.0);
  EXPECT_EQ(program.host.checkpoint_staging, 0) << "BuildStepProgram leaves it to the evaluation";

  // Units that do not divide: rank 0 owns ceil(numel / G) of each.
  Plan odd = full;
  odd.model = PresetModel("tiny-llama");
  odd.gpus = 3;
  odd.seq_len = 64;
  NormaliseGrouping(odd);
  const StepProgram tiny = BuildStepProgram(odd, Profile("cpu"));
  double expected = 0;
  for (const int64_t numel : {odd.model.EmbeddingParams(), odd.model.HeadParams() + odd.model.FinalNormParams()})
    expected += static_cast<double>((numel + 2) / 3);
  expected += odd.model.layers * static_cast<double>((odd.model.ParamsPerBlock() + 2) / 3);
  EXPECT_DOUBLE_EQ(CheckpointStagingBytesPerRank(tiny), 12 * expected);
}

TEST(CheckpointStagingTest, OnlyTheFirstShardGroupStagesSoTheNodeSharesIt) {
  const HardwareProfile h100 = Profile("h100-sxm-80g");
  // no_shard on 8 GPUs: rank 0 alone stages the whole model (12 x 8.03e9 =
  // 96 GB); its node's 8 GPUs share that.
  const Plan ddp = MakePlan(8, ShardingStrategy::kNoShard, 0, Offload::kNone);
  const StepProgram ddp_program = BuildStepProgram(ddp, h100);
  const double whole = 12 * 8'030'261'248.0;
  EXPECT_DOUBLE_EQ(CheckpointStagingBytesPerRank(ddp_program), whole);
  EXPECT_DOUBLE_EQ(CheckpointStagingBytesPerGpu(ddp, ddp_program), whole / 8);
  // hybrid_shard(2) on 16 GPUs: ranks 0 and 1 stage half each, on the first node's 8 GPUs.
  const Plan hybrid = MakePlan(16, ShardingStrategy::kHybridShard, 2, Offload::kNone);
  const StepProgram hybrid_program = BuildStepProgram(hybrid, h100);
  EXPECT_DOUBLE_EQ(CheckpointStagingBytesPerRank(hybrid_program), whole / 2);
  EXPECT_DOUBLE_EQ(CheckpointStagingBytesPerGpu(hybrid, hybrid_program), 2 * (whole / 2) / 8);
}

TEST(CheckpointStagingTest, EvaluationCountsItInTheHostFigureAndCanRefuseThePlan) {
  const HardwareProfile h100 = Profile("h100-sxm-80g");
  Plan plan = MakePlan(8, ShardingStrategy::kFullShard, 0, Offload::kOptimizer);
  const Estimate plain = EvaluatePlan(plan, h100);
  EvaluateOptions async;
  async.ckpt_async = true;
  const Estimate staged = EvaluatePlan(plan, h100, async);
  const double staging = 12 * 1'003'782'656.0;
  EXPECT_DOUBLE_EQ(staged.memory.host_bytes, plain.memory.host_bytes + staging);
  const auto term = std::find_if(staged.memory.host_breakdown.begin(), staged.memory.host_breakdown.end(),
                                 [](const auto& t) { return t.first == "checkpoint_staging"; });
  ASSERT_NE(term, staged.memory.host_breakdown.end());
  EXPECT_DOUBLE_EQ(term->second, staging);
  // Device memory and time are what they were: the staging lives on the host.
  EXPECT_DOUBLE_EQ(staged.memory.device_peak_bytes, plain.memory.device_peak_bytes);
  EXPECT_DOUBLE_EQ(staged.time.step_seconds, plain.time.step_seconds);

  // A node whose memory holds the offloaded state but not the staging too.
  plan.host_memory_per_node_bytes = 8 * (plain.memory.host_bytes + staging / 2);
  EXPECT_TRUE(EvaluatePlan(plan, h100).fits) << EvaluatePlan(plan, h100).why_not;
  const Estimate refused = EvaluatePlan(plan, h100, async);
  EXPECT_FALSE(refused.fits);
  EXPECT_EQ(refused.why_not.rfind("host memory ", 0), 0u) << refused.why_not;
}

TEST(CheckpointStagingTest, EstimateCkptAsyncPrintsAndJudgesTheStaging) {
  testing::ScratchDir dir;
  const std::string pins = "estimate --model llama3-8b --gpus 8 --gpu h100-sxm-80g --seq 4096 --global-batch 8 "
                           "--strategy full_shard --micro-batch 1 --offload optimizer";
  const testing::CliResult text = testing::RunCli(pins + " --ckpt-async", dir);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("host checkpoint_staging"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("11.22 GiB"), std::string::npos) << "12 x 1,003,782,656 bytes: " << text.out;
  const testing::CliResult without = testing::RunCli(pins, dir);
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_EQ(without.out.find("checkpoint_staging"), std::string::npos) << without.out;

  const testing::CliResult json = testing::RunCli(pins + " --ckpt-async --json", dir);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_DOUBLE_EQ(j["memory"]["host_breakdown"]["checkpoint_staging"].get<double>(), 12 * 1'003'782'656.0) << json.out;

  // Host memory that holds the offloaded state alone: the staging makes the
  // pinned plan not fit, and estimate says so.
  const double host_gib = 8 * (j["memory"]["host_bytes"].get<double>() - 12 * 1'003'782'656.0 / 2) / 1073741824.0;
  const std::string tight = pins + " --host-memory " + std::to_string(host_gib);
  EXPECT_EQ(testing::RunCli(tight, dir).exit_code, 0);
  const testing::CliResult refused = testing::RunCli(tight + " --ckpt-async", dir);
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.err.find("host memory"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace llmplan
