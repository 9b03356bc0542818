// `llmplan doctor` end to end through the built binary on a CPU build: it
// says there is no GPU, one line per check, exits 0, and --json parses. (A
// CUDA build sees the GPU machine's GPUs: profile_gpu_test.cc covers it.)
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"

namespace llmplan {
namespace {

using executor_test::CommandResult;
using executor_test::RunLlmplan;

#ifndef LLMPLAN_WITH_CUDA
// A CPU build has no GPU to see, whatever the machine: the doctor says so.
TEST(DoctorCliTest, WithoutAGpuSaysSoAndExitsZero) {
  const CommandResult r = RunLlmplan("doctor");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("skipped  gpus"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("llmplan doctor: 0 problems"), std::string::npos) << r.output;
}

TEST(DoctorCliTest, JsonParsesAndJudgesTheEnvironmentItRunsIn) {
  const CommandResult r = RunLlmplan("doctor --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["exit_status"], 0);
  EXPECT_EQ(j["problems"], 0);
  bool host = false;
  for (const auto& check : j["checks"]) {
    EXPECT_TRUE(check.contains("verdict") && check.contains("message")) << check.dump();
    host = host || check["check"] == "host";
  }
  EXPECT_TRUE(host) << r.output;
  // A variable set in the environment gets its own line.
  const CommandResult with = executor_test::RunCommand("NCCL_DEBUG=WARN " + std::string(LLMPLAN_BINARY) + " doctor");
  EXPECT_EQ(with.status, 0) << with.output;
  EXPECT_NE(with.output.find("NCCL_DEBUG=WARN"), std::string::npos) << with.output;
}

// --tune with nothing to time says why and exits 0; its options alone are refused.
TEST(DoctorCliTest, TuneWithoutGpusOrCollectivesSaysThereIsNothingToTune) {
  const std::string dir = ::testing::TempDir();
  ASSERT_EQ(RunLlmplan("estimate --model llama3.2-1b --gpu h200-sxm --gpus 2 --seq 2048 --global-batch 8 --strategy "
                       "full_shard -o " + dir + "/two.plan.json").status, 0);
  CommandResult two = RunLlmplan("doctor --tune --plan " + dir + "/two.plan.json");
  EXPECT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("no GPU visible (or a build without CUDA): nothing to tune"), std::string::npos) << two.output;
  ASSERT_EQ(RunLlmplan("estimate --model llama3.2-1b --gpu h200-sxm --gpus 1 --seq 2048 --global-batch 8 -o " + dir +
                       "/one.plan.json").status, 0);
  CommandResult one = RunLlmplan("doctor --tune --plan " + dir + "/one.plan.json");
  EXPECT_EQ(one.status, 0) << one.output;
  EXPECT_NE(one.output.find("the plan runs no collective among several GPUs of a node"), std::string::npos) << one.output;
  CommandResult alone = RunLlmplan("doctor --plan " + dir + "/one.plan.json");
  EXPECT_EQ(alone.status, 2) << alone.output;
  EXPECT_NE(alone.output.find("--plan and --write-profile go with --tune"), std::string::npos) << alone.output;
  CommandResult no_plan = RunLlmplan("doctor --tune");
  EXPECT_EQ(no_plan.status, 2) << no_plan.output;
  EXPECT_NE(no_plan.output.find("doctor --tune needs --plan PLAN"), std::string::npos) << no_plan.output;
}
#endif

}  // namespace
}  // namespace llmplan
