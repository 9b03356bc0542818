// `llmplan calibrate` on real CPU runs: three short `llmplan run`s of
// tiny-llama with different micro-batches, calibrated on two with the third
// held out; then on runs recorded on one H200. The written profile must plan,
// the recorded runs' step-time error must end lower than the shipped
// profile's, and bad input is one line and exit status 2.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "tests/cli_runner.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using executor_test::CommandResult;
using executor_test::RunLlmplan;

class CalibrateCliTest : public ::testing::Test {
 protected:
  // The runs are shared by the suite's tests: each costs a LibTorch start.
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("llmplan_calibrate_cli_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::vector<uint16_t> tokens(20000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % 500);
    std::ofstream(Path("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    for (int micro_batch : {8, 4, 2}) {
      Plan plan;
      plan.model = PresetModel("tiny-llama");
      plan.profile = "cpu";
      plan.gpus = 1;
      plan.strategy = ShardingStrategy::kNoShard;
      NormaliseGrouping(plan);
      plan.seq_len = 64;
      plan.micro_batch = micro_batch;
      plan.grad_accum = 8 / micro_batch;
      const std::string name = "mb" + std::to_string(micro_batch);
      SavePlan(plan, Path(name + ".json"));
      const CommandResult run = RunLlmplan("run --plan " + Path(name + ".json") + " --data " + Path("tokens.bin") +
                                           " --steps 3 --out " + Path(name) + " --cpu");
      ASSERT_EQ(run.status, 0) << run.output;
    }
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string Path(const std::string& name) { return (dir_ / name).string(); }

  static std::filesystem::path dir_;
};
std::filesystem::path CalibrateCliTest::dir_;

TEST_F(CalibrateCliTest, FitsTwoRunsAndReportsTheHeldOutOne) {
  const std::string out = Path("cpu-calibrated.json");
  const CommandResult text =
      RunLlmplan("calibrate --runs " + Path("mb8") + " " + Path("mb4") + " --holdout " + Path("mb2") + " -o " + out);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("held-out runs"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find(Path("mb2")), std::string::npos) << text.output;

  const CommandResult plan =
      RunLlmplan("estimate --model tiny-llama --gpus 1 --gpu " + out + " --seq 64 --global-batch 8");
  EXPECT_EQ(plan.status, 0) << plan.output;

  const CommandResult json = RunLlmplan("calibrate --runs " + Path("mb8") + " " + Path("mb4") + " --holdout " +
                                        Path("mb2") + " -o " + out + " --json");
  ASSERT_EQ(json.status, 0) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  const nlohmann::json& fitted = j.at("calibration").at("fitted_runs").at("step_time");
  // No bound on the fit's error here: these are CPU step times of 3-step
  // runs, which load moves (the fit ended 12.6% off on an idle 2-core machine
  // and past 20% beside two compile jobs). How well calibrate fits is checked
  // on recorded GPU runs below, whose times do not move.
  EXPECT_TRUE(std::isfinite(fitted.at("mape_before").get<double>())) << fitted;
  EXPECT_TRUE(std::isfinite(fitted.at("mape_after").get<double>())) << fitted;
  EXPECT_EQ(j.at("calibration").at("held_out_runs").at("runs").at(0).at("dir"), Path("mb2"));
}

// The command on runs recorded on one H200 (tests/data/runs, the fixture
// calibration_test.cc fits through the library): the fit through the CLI must
// make its own runs' step times and the held-out run's closer than the
// shipped profile does.
TEST_F(CalibrateCliTest, FitsRecordedH200RunsCloserThanTheShippedProfile) {
  const std::string runs = testing::SourceDir() + "/tests/data/runs/";
  const std::string out = Path("h200-calibrated.json");
  const CommandResult json = RunLlmplan("calibrate --runs " + runs + "a01 " + runs + "a09 " + runs + "a12 --holdout " +
                                        runs + "a02 --profile h200-sxm -o " + out + " --json");
  ASSERT_EQ(json.status, 0) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  const nlohmann::json& fitted = j.at("calibration").at("fitted_runs").at("step_time");
  EXPECT_LT(fitted.at("mape_after").get<double>(), fitted.at("mape_before").get<double>()) << fitted;
  EXPECT_LT(fitted.at("mape_after").get<double>(), 0.02) << fitted;  // 7.8% -> 0.8% when written
  const nlohmann::json& held_out = j.at("calibration").at("held_out_runs");
  EXPECT_EQ(held_out.at("runs").at(0).at("dir"), runs + "a02");
  EXPECT_LT(held_out.at("step_time").at("mape_after").get<double>(),
            held_out.at("step_time").at("mape_before").get<double>())  // 5.2% -> 0.6%
      << held_out;
  const CommandResult plan =
      RunLlmplan("estimate --model llama3.2-1b --gpus 1 --gpu " + out + " --seq 4096 --global-batch 4");
  EXPECT_EQ(plan.status, 0) << plan.output;
}

TEST_F(CalibrateCliTest, BadInputIsOneLineAndExitTwo) {
  for (const std::string& args :
       {"calibrate --runs " + Path("missing") + " -o " + Path("x.json"),
        "calibrate --runs " + Path("mb8") + " --profile h200-sxm -o " + Path("x.json"),  // a CPU run, a GPU profile
        "calibrate --runs " + Path("mb8") + " -o " + Path("no/such/dir/x.json"), std::string("calibrate -o x.json")}) {
    const CommandResult r = RunLlmplan(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace llmplan
