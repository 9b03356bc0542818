// The calibration store against a known answer: synthetic runs measured as a
// "true" profile simulates them (tests/feedback/synthetic_run.h), recorded
// the way `llmplan run` records every run, then fitted the way `llmplan
// estimate` fits them. What a user relies on: the store fills, the fit
// predicts runs it did not see, an odd run does not move it, and entries of
// another setup are set aside with a note.
#include "feedback/calibration_store.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/user_error.h"
#include "simulator/evaluate.h"
#include "tests/feedback/synthetic_run.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using testing::PresetPlan;
using testing::Profile;
using testing::ScratchDir;
using testing::SimulatedTimes;
using testing::SyntheticTimes;
using testing::WriteSyntheticRun;

// h200-sxm with its compute, copy and host terms off by known factors.
HardwareProfile TrueProfile() {
  HardwareProfile p = Profile("h200-sxm");
  p.gemm_max_efficiency *= 0.9;
  p.attention_forward_flops_per_s *= 0.8;
  p.attention_backward_flops_per_s *= 0.85;
  p.elementwise_efficiency *= 0.9;
  p.host_to_device_bytes_per_s *= 0.8;
  p.device_to_host_bytes_per_s *= 0.9;
  p.cpu_adam_params_per_s *= 0.6;
  p.cpu_adam_alone_params_per_s *= 0.6;
  p.step_overhead_s = 3e-3;
  return p;
}

std::vector<Plan> RecordedPlans() {
  return {PresetPlan("llama3.2-1b", 1, ShardingStrategy::kFullShard, 1, 1024, 2),
          PresetPlan("llama3.2-1b", 2, ShardingStrategy::kFullShard, 2, 4096, 1, {0, 1, 2, 3}),
          PresetPlan("llama3.2-3b", 2, ShardingStrategy::kNoShard, 1, 2048, 1),
          PresetPlan("qwen2.5-7b", 1, ShardingStrategy::kFullShard, 1, 512, 1, {}, Offload::kOptimizer)};
}

MachineIdentity Here() {
  MachineIdentity m;
  m.gpu_model = "NVIDIA H200";
  m.gpus = 8;
  m.driver = "570.86.15";
  m.host_cpu = "Intel(R) Xeon(R) Platinum 8480+ x 224";
  m.build = {"0.1.0", "2.11.0", "13.0", "2.28.9"};
  return m;
}

class CalibrationStoreTest : public ::testing::Test {
 protected:
  std::string store() const { return dir_.File("store"); }

  // A run of `plan` measured as `truth` simulates it, `slower` times over.
  std::string WriteRun(const std::string& name, const Plan& plan, const HardwareProfile& truth, double slower = 1,
                       int steps = 6) {
    const StepProgram program = BuildStepProgram(plan, Profile(plan.profile));
    SyntheticTimes t = SimulatedTimes(program, truth);
    for (OpTiming& s : t.spans) {
      s.start *= slower;
      s.end *= slower;
    }
    for (double& i : t.issued) i *= slower;
    t.step_s *= slower;
    testing::SyntheticRunOptions o;
    o.steps = steps;
    const std::string run_dir = dir_.File(name);
    WriteSyntheticRun(run_dir, plan, program, t, o);
    return run_dir;
  }

  // Records a run of each RecordedPlans() plan, measured on the truth.
  void RecordTheTruth() {
    const std::vector<Plan> plans = RecordedPlans();
    for (size_t i = 0; i < plans.size(); ++i) RecordRun(store(), WriteRun("run" + std::to_string(i), plans[i], TrueProfile()), Here(), nullptr);
  }

  // The fit's predicted step for a plan no recorded run ran.
  double PredictedHeldOutStep(const HardwareProfile& profile) {
    const Plan plan = PresetPlan("llama3.2-3b", 2, ShardingStrategy::kFullShard, 1, 8192, 1, {0, 5, 10, 15, 20, 25});
    return EvaluatePlan(plan, profile).time.step_seconds;
  }

  ScratchDir dir_;
};

TEST_F(CalibrationStoreTest, ARecordedRunIsAnEntryOfItsHardwareTrimmedToWhatAFitReads) {
  const std::string run = WriteRun("long", RecordedPlans()[0], TrueProfile(), 1, 30);
  std::string entry;
  const RunAgainstStore against = RecordRun(store(), run, Here(), &entry);
  EXPECT_FALSE(against.compared);  // an empty store has nothing to hold it against
  EXPECT_EQ(fs::path(entry).parent_path(), fs::path(store()) / "h200-sxm");
  const std::vector<StoreEntry> entries = ListStore(store());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].dir, entry);
  EXPECT_EQ(entries[0].model, "llama3.2-1b");
  EXPECT_GT(entries[0].step_s, 0);
  EXPECT_TRUE(IdentityDifference(entries[0].machine, Here()).empty());
  // The last 8 steps' op times, and the first two steps' metrics besides
  // theirs (which say which steps were the warm-up).
  std::ifstream times(entry + "/op_times.jsonl"), metrics(entry + "/metrics.jsonl");
  int time_lines = 0, metric_lines = 0;
  for (std::string line; std::getline(times, line);) ++time_lines;
  for (std::string line; std::getline(metrics, line);) ++metric_lines;
  EXPECT_EQ(time_lines, 8);
  EXPECT_EQ(metric_lines, 10);
  const MeasuredRun kept = LoadMeasuredRun(entry);
  EXPECT_EQ(kept.TimedSteps().size(), 8u);
}

TEST_F(CalibrationStoreTest, TheFitPredictsARunItDidNotSee) {
  RecordTheTruth();
  const StoreFit fit = FitStore(store(), Profile("h200-sxm"), Here());
  ASSERT_TRUE(fit.profile.has_value());
  EXPECT_EQ(fit.used.size(), 4u);
  EXPECT_TRUE(fit.outliers.empty());
  EXPECT_LT(fit.held_out_error, 0.03);
  const double truth = PredictedHeldOutStep(TrueProfile());
  const double shipped = PredictedHeldOutStep(Profile("h200-sxm"));
  const double calibrated = PredictedHeldOutStep(*fit.profile);
  EXPECT_GT(std::abs(shipped - truth) / truth, 0.05) << "the shipped profile is off, or the test shows nothing";
  EXPECT_LT(std::abs(calibrated - truth) / truth, 0.03) << calibrated << " vs " << truth;
}

TEST_F(CalibrationStoreTest, OnlyTheNewestEntriesAreFittedAndTheNoteSaysHowMany) {
  RecordTheTruth();  // four runs, oldest first
  const StoreFit three = FitStore(store(), Profile("h200-sxm"), Here(), 3);
  ASSERT_TRUE(three.profile.has_value());
  ASSERT_EQ(three.used.size(), 3u);
  const std::vector<StoreEntry> listed = ListStore(store());  // oldest first
  ASSERT_EQ(listed.size(), 4u);
  for (const std::string& used : three.used)
    EXPECT_NE(fs::path(used).filename(), fs::path(listed[0].dir).filename()) << "the oldest is left out: " << used;
  bool noted = false;
  for (const std::string& note : three.notes) noted |= note.find("fitted the newest 3 of 4 runs") != std::string::npos;
  EXPECT_TRUE(noted);
  const StoreFit all = FitStore(store(), Profile("h200-sxm"), Here());
  EXPECT_EQ(all.used.size(), 4u);
  for (const std::string& note : all.notes) EXPECT_EQ(note.find("fitted the newest"), std::string::npos) << note;
}

TEST_F(CalibrationStoreTest, AnOddRunIsReportedAndDoesNotMoveTheFit) {
  RecordTheTruth();
  const StoreFit before = FitStore(store(), Profile("h200-sxm"), Here());
  ASSERT_TRUE(before.profile.has_value());
  // The same plan as run0, on a day the host was 30% slower at everything.
  const RunAgainstStore against =
      RecordRun(store(), WriteRun("odd", RecordedPlans()[0], TrueProfile(), 1.3), Here(), nullptr);
  EXPECT_TRUE(against.compared);
  EXPECT_EQ(against.runs, 4);
  EXPECT_TRUE(against.disagrees) << against.error << " vs " << against.threshold;
  EXPECT_LT(against.error, -0.15);  // predicted faster than it ran
  const StoreFit after = FitStore(store(), Profile("h200-sxm"), Here());
  ASSERT_TRUE(after.profile.has_value());
  ASSERT_EQ(after.outliers.size(), 1u);
  EXPECT_NE(after.outliers[0].find("h200-sxm"), std::string::npos);
  EXPECT_EQ(after.used.size(), 4u);
  EXPECT_DOUBLE_EQ(PredictedHeldOutStep(*after.profile), PredictedHeldOutStep(*before.profile));
  ASSERT_FALSE(after.notes.empty());
  EXPECT_NE(after.notes.back().find("left out 1 run(s) that disagree"), std::string::npos) << after.notes.back();
}

TEST_F(CalibrationStoreTest, EntriesOfAnotherSetupAreIgnoredWithANote) {
  RecordTheTruth();
  MachineIdentity older = Here();
  older.build.llmplan = "0.0.9";
  RecordRun(store(), WriteRun("older", RecordedPlans()[1], TrueProfile(), 1.5), older, nullptr);
  const StoreFit fit = FitStore(store(), Profile("h200-sxm"), Here());
  EXPECT_EQ(fit.used.size(), 4u);
  EXPECT_TRUE(fit.outliers.empty());
  ASSERT_FALSE(fit.notes.empty());
  EXPECT_EQ(fit.notes[0], "ignored 1 run(s) recorded on another setup: llmplan 0.1.0 (recorded with 0.0.9)");
  // On a machine with other GPUs none applies.
  MachineIdentity other = Here();
  other.gpu_model = "NVIDIA H100 80GB HBM3";
  const StoreFit elsewhere = FitStore(store(), Profile("h200-sxm"), other);
  EXPECT_FALSE(elsewhere.profile.has_value());
  ASSERT_EQ(elsewhere.notes.size(), 2u);
  EXPECT_NE(elsewhere.notes[1].find("GPU NVIDIA H100 80GB HBM3 (recorded with NVIDIA H200)"), std::string::npos)
      << elsewhere.notes[1];
  // Another hardware's profile sees none of them.
  EXPECT_FALSE(FitStore(store(), Profile("cpu"), Here()).profile.has_value());
}

TEST_F(CalibrationStoreTest, TheFitIsCachedUntilTheEntriesChange) {
  RecordTheTruth();
  const StoreFit first = FitStore(store(), Profile("h200-sxm"), Here());
  const fs::path cache = fs::path(store()) / "h200-sxm" / "fit.json";
  ASSERT_TRUE(fs::exists(cache));
  const auto written = fs::last_write_time(cache);
  const StoreFit again = FitStore(store(), Profile("h200-sxm"), Here());
  EXPECT_EQ(fs::last_write_time(cache), written);
  EXPECT_EQ(again.used, first.used);
  EXPECT_DOUBLE_EQ(PredictedHeldOutStep(*again.profile), PredictedHeldOutStep(*first.profile));
  RecordRun(store(), WriteRun("fifth", RecordedPlans()[2], TrueProfile()), Here(), nullptr);
  EXPECT_EQ(FitStore(store(), Profile("h200-sxm"), Here()).used.size(), 5u);
}

TEST_F(CalibrationStoreTest, ARunTooShortToCalibrateIsRefusedAndForgetEmptiesTheStore) {
  try {
    RecordRun(store(), WriteRun("short", RecordedPlans()[0], TrueProfile(), 1, 2), Here(), nullptr);
    ADD_FAILURE() << "a 2-step run was recorded";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("3 or more"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(ListStore(store()).empty());
  RecordTheTruth();
  EXPECT_EQ(ForgetStore(store(), "cpu"), 0);
  EXPECT_EQ(ForgetStore(store(), "h200-sxm"), 4);
  EXPECT_TRUE(ListStore(store()).empty());
  EXPECT_FALSE(FitStore(store(), Profile("h200-sxm"), Here()).profile.has_value());
}

TEST_F(CalibrationStoreTest, ThisMachineIsReadWithoutCuda) {
  const MachineIdentity m = ThisMachine({"9.9.9", "", "", ""});
  EXPECT_EQ(m.build.llmplan, "9.9.9");
  EXPECT_FALSE(m.host_cpu.empty());
  EXPECT_GE(m.gpus, 0);
  EXPECT_TRUE(IdentityDifference(m, m).empty());
  const MachineIdentity round_trip = MachineIdentityFromJson(MachineIdentityToJson(m), "test");
  EXPECT_TRUE(IdentityDifference(round_trip, m).empty());
}

}  // namespace
}  // namespace llmplan
