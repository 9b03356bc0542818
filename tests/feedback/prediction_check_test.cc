// The in-run check against a known answer: a synthetic run measured exactly
// as its profile predicts says nothing; the same run with its GPU optimizer
// made slow names that class first, by the time it added.
#include "feedback/prediction_check.h"

#include <string>

#include <gtest/gtest.h>

#include "feedback/calibration.h"
#include "tests/feedback/synthetic_run.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::PresetPlan;
using testing::Profile;
using testing::ScratchDir;
using testing::SimulatedTimes;
using testing::SyntheticTimes;
using testing::WriteSyntheticRun;

Comparison CompareRun(const ScratchDir& dir, const std::string& name, double optimizer_extra_s) {
  const Plan plan = PresetPlan("llama3.2-1b", 1, ShardingStrategy::kFullShard, 2, 2048, 1);
  const HardwareProfile profile = Profile("h200-sxm");
  const StepProgram program = BuildStepProgram(plan, profile);
  SyntheticTimes t = SimulatedTimes(program, profile);
  // The optimizer ops (one per unit) take optimizer_extra_s longer together;
  // every op after each ends that much later.
  int optimizer_ops = 0;
  for (const StepOp& op : program.ops) optimizer_ops += op.kind == OpKind::kOptimizerStep;
  double shift = 0;
  for (const StepOp& op : program.ops) {
    t.spans[op.id].start += shift;
    if (op.kind == OpKind::kOptimizerStep) shift += optimizer_extra_s / optimizer_ops;
    t.spans[op.id].end += shift;
    t.issued[op.id] += shift;
  }
  t.step_s += shift;
  testing::SyntheticRunOptions o;
  o.steps = 6;
  WriteSyntheticRun(dir.File(name), plan, program, t, o);
  return CompareOnProfile(PrepareCalibrationRun(LoadMeasuredRun(dir.File(name)), profile), profile);
}

TEST(PredictionCheckTest, SilentOnARunThatMatchesItsPrediction) {
  ScratchDir dir;
  const Comparison c = CompareRun(dir, "matching", 0);
  EXPECT_LT(std::abs(c.step_time_s.error()), 0.01);
  EXPECT_TRUE(PredictionDisagreement(c, 0.05, dir.File("matching"), 0).is_null());
}

TEST(PredictionCheckTest, ASlowOptimizerIsNamedWithTheTimeItAdded) {
  ScratchDir dir;
  const Comparison matching = CompareRun(dir, "matching", 0);
  const double extra = 0.2 * matching.step_time_s.measured;
  const Comparison c = CompareRun(dir, "slow", extra);
  const nlohmann::json notice = PredictionDisagreement(c, 0.05, dir.File("slow"), 0);
  ASSERT_TRUE(notice.is_object());
  EXPECT_NEAR(notice["error"].get<double>(), -1.0 / 6, 0.01);  // predicted 1, measured 1.2
  ASSERT_GE(notice["classes"].size(), 1u);
  EXPECT_EQ(notice["classes"][0]["name"], "gpu_optimizer");
  EXPECT_NEAR(notice["classes"][0]["difference_s"].get<double>(), extra, 0.01 * extra);
  const std::string message = notice["message"];
  EXPECT_EQ(message.rfind("llmplan: note: the steps take 20.0% longer than predicted", 0), 0u) << message;
  EXPECT_NE(message.find(": gpu_optimizer +"), std::string::npos) << message;
  EXPECT_NE(message.find("llmplan compare --run " + dir.File("slow")), std::string::npos) << message;
  // Within what runs here stray by, the same run is no news.
  EXPECT_TRUE(PredictionDisagreement(c, 0.25, dir.File("slow"), 3).is_null());
}

}  // namespace
}  // namespace llmplan
