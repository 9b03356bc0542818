// `llmplan calibrate` run as a user runs it, on synthetic run directories
// (no LibTorch): the written profile loads and plans, the report names the
// held-out runs, --json parses, and every bad input is exit status 2 with
// one line on stderr.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/hardware_profile.h"
#include "base/json_read.h"
#include "tests/feedback/synthetic_run.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::CliResult;
using testing::PresetPlan;
using testing::Profile;
using testing::RunCli;
using testing::ScratchDir;
using testing::SimulatedTimes;
using testing::WriteSyntheticRun;

// Three runs measured as h200-sxm with slower GEMMs would run them. With no
// kernel overhead, small-llama's ops run at the host's launch pace, some of
// them beside a collective: the fit must leave them out to be exact.
void WriteRuns(const ScratchDir& dir) {
  const HardwareProfile start = Profile("h200-sxm");
  HardwareProfile truth = start;
  truth.gemm_max_efficiency *= 0.8;
  truth.step_overhead_s = 2e-3;
  const std::vector<Plan> plans = {PresetPlan("llama3.2-1b", 1, ShardingStrategy::kFullShard, 1, 1024, 1),
                                   PresetPlan("small-llama", 2, ShardingStrategy::kFullShard, 4, 512, 1),
                                   PresetPlan("llama3.2-1b", 2, ShardingStrategy::kNoShard, 2, 2048, 1)};
  for (size_t i = 0; i < plans.size(); ++i) {
    const StepProgram program = BuildStepProgram(plans[i], start);
    WriteSyntheticRun(dir.File("run" + std::to_string(i)), plans[i], program, SimulatedTimes(program, truth));
  }
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

void ExpectBadInput(const std::string& args, const ScratchDir& dir, const std::string& says) {
  SCOPED_TRACE("llmplan " + args);
  const CliResult r = RunCli(args, dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("llmplan: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
}

TEST(CalibrateCommandTest, WritesAProfileThatPlansAndReportsTheHeldOutRun) {
  ScratchDir dir;
  WriteRuns(dir);
  const std::string out = dir.File("h200-sxm-calibrated.json");
  const CliResult r = RunCli(
      "calibrate --runs " + dir.File("run0") + " " + dir.File("run1") + " --holdout " + dir.File("run2") + " -o " + out,
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("held-out runs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(dir.File("run2")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compute.gemm.max_efficiency"), std::string::npos) << r.out;

  const HardwareProfile p = LoadHardwareProfile(out);  // the reader skips "calibration"
  EXPECT_EQ(p.name, "h200-sxm-calibrated");
  EXPECT_NEAR(p.gemm_max_efficiency, 0.8 * Profile("h200-sxm").gemm_max_efficiency, 1e-6);
  const nlohmann::json j = ReadJsonFile(out, "calibrated profile");
  const nlohmann::json& record = j.at("calibration");
  EXPECT_EQ(record.at("from_profile"), "h200-sxm");
  EXPECT_TRUE(record.at("terms").is_array());
  EXPECT_EQ(record.at("fitted_runs").at("runs").size(), 2u);
  EXPECT_EQ(record.at("held_out_runs").at("runs").at(0).at("dir"), dir.File("run2"));
  EXPECT_LT(record.at("held_out_runs").at("step_time").at("mape_after").get<double>(), 1e-3);
  EXPECT_GT(record.at("held_out_runs").at("step_time").at("mape_before").get<double>(), 0.01);

  const CliResult plan =
      RunCli("estimate --model llama3.2-1b --gpus 2 --gpu " + out + " --seq 2048 --global-batch 8", dir);
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
}

TEST(CalibrateCommandTest, JsonOutputParses) {
  ScratchDir dir;
  WriteRuns(dir);
  const CliResult r = RunCli("calibrate --runs " + dir.File("run0") + " -o " + dir.File("out.json") + " --json", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("profile"), "h200-sxm-calibrated");
  EXPECT_TRUE(j.at("calibration").at("fitted_runs").at("runs").at(0).at("after").contains("step_time_s"));
}

TEST(CalibrateCommandTest, BadInputIsOneLineAndExitTwo) {
  ScratchDir dir;
  WriteRuns(dir);
  const std::string out = " -o " + dir.File("out.json");
  ExpectBadInput("calibrate" + out, dir, "--runs");
  ExpectBadInput("calibrate --runs " + dir.File("nowhere") + out, dir, "does not exist");
  ExpectBadInput("calibrate --runs " + dir.File("run0") + " -o " + dir.File("no/such/dir/out.json"), dir,
                 "cannot write");

  // A run planned for other hardware, fitted or held out.
  Plan other = PresetPlan("llama3.2-1b", 1, ShardingStrategy::kFullShard, 1, 1024, 1);
  other.profile = "h100-sxm-80g";
  const StepProgram program = BuildStepProgram(other, Profile("h100-sxm-80g"));
  WriteSyntheticRun(dir.File("h100"), other, program, SimulatedTimes(program, Profile("h100-sxm-80g")));
  ExpectBadInput("calibrate --runs " + dir.File("run0") + " --holdout " + dir.File("h100") + out, dir,
                 "different hardware");

  // Nothing measured: no term can be fitted.
  const Plan tiny = PresetPlan("tiny-llama", 1, ShardingStrategy::kFullShard, 1, 64, 1);
  const StepProgram tiny_program = BuildStepProgram(tiny, Profile("h200-sxm"));
  testing::SyntheticTimes zero = SimulatedTimes(tiny_program, Profile("h200-sxm"));
  for (OpTiming& span : zero.spans) span = {0, 0};
  for (double& issued : zero.issued) issued = 0;
  WriteSyntheticRun(dir.File("empty"), tiny, tiny_program, zero);
  ExpectBadInput("calibrate --runs " + dir.File("empty") + out, dir, "too few measured ops");
}

}  // namespace
}  // namespace llmplan
