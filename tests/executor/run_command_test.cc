// `llmplan run` end to end through the built binary on CPU: a plan from
// `llmplan estimate --gpu cpu`, real text from `llmplan data prepare`, a short
// run whose loss falls; and one-line errors with exit status 2.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/executor/cli_runner.h"
#include <nlohmann/json.hpp>

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
    Plan plan;
    plan.model = PresetModel("tiny-llama");
    plan.profile = "cpu";
    plan.gpus = 1;
    plan.strategy = ShardingStrategy::kNoShard;
    NormaliseGrouping(plan);
    plan.seq_len = 64;
    plan.micro_batch = 2;
    SavePlan(plan, Path("plan.json"));
    std::vector<uint16_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 200);
    tokens[1000] = odd_token;
    std::ofstream(Path("text.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }

  std::filesystem::path dir_;
};

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

}  // namespace
}  // namespace llmplan
