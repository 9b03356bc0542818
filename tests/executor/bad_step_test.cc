// Diverging steps: the monitor's rule, and `llmplan run` stopping (or
// skipping updates) when training blows up instead of ending with exit 0.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "executor/run/bad_step.h"
#include "base/user_error.h"
#include "tests/cli_runner.h"

namespace llmplan::executor {
namespace {

namespace fs = std::filesystem;

TEST(BadStepMonitor, NonFiniteIsAlwaysBadSpikesOnlyAfterAHistory) {
  BadStepMonitor m({BadStepAction::kStop, 10});
  EXPECT_NE(m.Judge(std::nan(""), 1.0).find("loss is nan"), std::string::npos);
  EXPECT_NE(m.Judge(3.0, std::numeric_limits<double>::infinity()).find("gradient norm is inf"), std::string::npos);
  EXPECT_FALSE(m.GradNormIsGood(std::nan("")));
  // Early steps are never spikes: 9 good steps, then a large one is still good.
  for (int i = 0; i < 9; ++i) EXPECT_EQ(m.Judge(6.4, 1.0), "");
  EXPECT_EQ(m.Judge(6.4 * 5, 1.0), "");  // the 10th: history was 9
  // Now 10 known (mean loss ~8.96): 2,150 is a spike, 50 is not.
  const std::string bad = m.Judge(2150, 1.0);
  EXPECT_NE(bad.find("loss 2150 is"), std::string::npos) << bad;
  EXPECT_NE(bad.find("the last 10 steps"), std::string::npos) << bad;
  EXPECT_EQ(m.Judge(50, 1.0), "");
  EXPECT_TRUE(m.GradNormIsGood(9.0));
  EXPECT_FALSE(m.GradNormIsGood(11.0));
  // Off: only non-finite values.
  BadStepMonitor off({BadStepAction::kSkip, 0});
  for (int i = 0; i < 20; ++i) off.Judge(1, 1);
  EXPECT_EQ(off.Judge(1e9, 1e9), "");
  EXPECT_THROW(BadStepMonitor({BadStepAction::kStop, 0.5}), UserError);
  EXPECT_THROW(ParseBadStepAction("ignore"), UserError);
}

class BadStepRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_bad_step_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::vector<uint16_t> tokens(20000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7 + i / 13) % 200);
    std::ofstream(Path("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    auto r = executor_test::RunLlmplan("estimate --model tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 4 "
                                       "--micro-batch 4 --warmup-steps 1 -o " + Path("plan.json"));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& n) const { return (dir_ / n).string(); }
  fs::path dir_;
};

// A learning rate of 0.9 with clipping off makes the loss and the gradient
// norm jump around from step to step; with a spike factor of 1.1 such jumps
// are "spikes" (the real default is 10x). By default the run stops and says
// so (exit 1, one line, no trace); with --bad-step skip it warns, skips those
// updates and runs to the end.
TEST_F(BadStepRunTest, DivergenceStopsTheRunOrSkipsTheUpdate) {
  {
    nlohmann::json plan = nlohmann::json::parse(std::ifstream(Path("plan.json")));
    plan["optimizer"]["grad_clip"] = 0.0;
    std::ofstream(Path("plan.json")) << plan.dump();
  }
  const std::string run = "run --cpu --plan " + Path("plan.json") + " --data " + Path("tokens.bin") +
                          " --steps 40 --lr 0.9 --dtype fp32 --spike-factor 1.1 --out ";
  auto stopped = executor_test::RunLlmplan(run + Path("stop"));
  EXPECT_EQ(stopped.status, 1) << stopped.output;
  EXPECT_NE(stopped.output.find("training diverged; stopped before saving this state"), std::string::npos)
      << stopped.output;
  EXPECT_EQ(stopped.output.find("frame #"), std::string::npos) << stopped.output;

  auto skipped = executor_test::RunLlmplan(run + Path("skip") + " --bad-step skip");
  ASSERT_EQ(skipped.status, 0) << skipped.output;
  EXPECT_NE(skipped.output.find("its update was skipped"), std::string::npos) << skipped.output;
  int skips = 0;
  std::ifstream metrics(Path("skip/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) skips += nlohmann::json::parse(line)["update_skipped"].get<bool>();
  EXPECT_GT(skips, 0);
}

}  // namespace
}  // namespace llmplan::executor
