// Calibration against a known answer: runs whose measured times are a "true"
// profile's simulation of their programs, fitted from the unchanged h200-sxm
// profile, must give back the true profile's terms — and the step times of
// runs that were not fitted.
#include "feedback/calibration.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "base/user_error.h"
#include "tests/feedback/synthetic_run.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::PresetPlan;
using testing::Profile;
using testing::ScratchDir;
using testing::SimulatedTimes;
using testing::SyntheticRunOptions;
using testing::WriteSyntheticRun;

// h200-sxm with every fitted term changed by a known factor.
HardwareProfile TrueProfile() {
  HardwareProfile p = Profile("h200-sxm");
  p.gemm_max_efficiency *= 0.9;
  p.gemm_half_efficiency_dim *= 1.5;
  p.attention_forward_flops_per_s *= 0.8;
  p.attention_backward_flops_per_s *= 0.85;
  p.elementwise_efficiency *= 0.9;
  p.kernel_overhead_s = 6e-6;  // above the launch cost, so no op runs at the host's pace
  p.kernel_launch_s = 5e-6;
  p.compute_slowdown_during_collectives = 0.15;
  for (auto& point : p.intra_node.all_gather.points) point.second *= 1.3;
  p.host_to_device_bytes_per_s *= 0.8;
  p.device_to_host_bytes_per_s *= 0.9;
  p.cpu_adam_params_per_s *= 0.6;
  p.cpu_adam_alone_params_per_s *= 0.6;
  p.step_overhead_s = 3e-3;
  return p;
}

// Different models, shapes (the smallest GEMM side is the token count in
// some, the hidden size in others), strategies, one and two GPUs, and an
// optimizer offload: together they exercise every fitted term.
std::vector<Plan> FittedPlans() {
  return {PresetPlan("llama3.2-1b", 1, ShardingStrategy::kFullShard, 1, 1024, 2),
          PresetPlan("llama3.2-1b", 2, ShardingStrategy::kFullShard, 2, 4096, 1, {0, 1, 2, 3}),
          PresetPlan("llama3.2-3b", 2, ShardingStrategy::kNoShard, 1, 2048, 1),
          PresetPlan("qwen2.5-7b", 1, ShardingStrategy::kFullShard, 1, 512, 1, {}, Offload::kOptimizer),
          PresetPlan("small-llama", 2, ShardingStrategy::kShardGradOp, 8, 256, 2)};
}

std::vector<Plan> HeldOutPlans() {
  return {PresetPlan("llama3.2-3b", 2, ShardingStrategy::kFullShard, 1, 8192, 1, {0, 5, 10, 15, 20, 25}),
          PresetPlan("llama2-7b", 1, ShardingStrategy::kFullShard, 2, 1024, 2)};
}

// Writes one run per plan, measured as `truth` simulates it, and reads them back.
std::vector<CalibrationRun> Runs(const ScratchDir& dir, const std::string& prefix, const std::vector<Plan>& plans,
                                 const HardwareProfile& truth, const HardwareProfile& start,
                                 const std::vector<double>& memory_factors = {}) {
  std::vector<CalibrationRun> runs;
  for (size_t i = 0; i < plans.size(); ++i) {
    const StepProgram program = BuildStepProgram(plans[i], start);
    SyntheticRunOptions o;
    if (i < memory_factors.size()) o.memory_factor = memory_factors[i];
    const std::string run_dir = dir.File(prefix + std::to_string(i));
    WriteSyntheticRun(run_dir, plans[i], program, SimulatedTimes(program, truth), o);
    runs.push_back(PrepareCalibrationRun(LoadMeasuredRun(run_dir), start));
  }
  return runs;
}

const FittedTerm& Term(const Calibration& c, const std::string& field) {
  for (const FittedTerm& t : c.terms)
    if (t.field == field) return t;
  throw std::logic_error("no term " + field);
}

const CurveFit& Curve(const Calibration& c, const std::string& field) {
  for (const CurveFit& f : c.curves)
    if (f.field == field) return f;
  throw std::logic_error("no curve " + field);
}

void ExpectRelativelyNear(double actual, double expected, double tolerance, const std::string& what) {
  EXPECT_LE(std::abs(actual - expected), tolerance * std::abs(expected))
      << what << ": " << actual << " vs " << expected;
}

TEST(CalibrationTest, RecoversTheTrueProfileAndPredictsHeldOutRuns) {
  ScratchDir dir;
  const HardwareProfile start = Profile("h200-sxm"), truth = TrueProfile();
  const auto fitted = Runs(dir, "fit", FittedPlans(), truth, start, {1.0, 1.04, 0.97});
  const auto held_out = Runs(dir, "held", HeldOutPlans(), truth, start);
  const Calibration c = Calibrate(start, fitted);
  const HardwareProfile& p = c.profile;

  constexpr double kTolerance = 1e-3;
  ExpectRelativelyNear(p.gemm_max_efficiency, truth.gemm_max_efficiency, kTolerance, "gemm max efficiency");
  ExpectRelativelyNear(p.gemm_half_efficiency_dim, truth.gemm_half_efficiency_dim, kTolerance, "half dim");
  ExpectRelativelyNear(p.attention_forward_flops_per_s, truth.attention_forward_flops_per_s, kTolerance, "attn fwd");
  ExpectRelativelyNear(p.attention_backward_flops_per_s, truth.attention_backward_flops_per_s, kTolerance, "attn bwd");
  ExpectRelativelyNear(p.elementwise_efficiency, truth.elementwise_efficiency, kTolerance, "elementwise");
  EXPECT_EQ(p.memory_bandwidth_bytes_per_s, start.memory_bandwidth_bytes_per_s);
  ExpectRelativelyNear(p.kernel_overhead_s, truth.kernel_overhead_s, kTolerance, "kernel overhead");
  ExpectRelativelyNear(p.kernel_launch_s, truth.kernel_launch_s, kTolerance, "kernel launch");
  ExpectRelativelyNear(p.compute_slowdown_during_collectives, truth.compute_slowdown_during_collectives, kTolerance,
                       "slowdown");
  ExpectRelativelyNear(p.host_to_device_bytes_per_s, truth.host_to_device_bytes_per_s, kTolerance, "h2d");
  ExpectRelativelyNear(p.device_to_host_bytes_per_s, truth.device_to_host_bytes_per_s, kTolerance, "d2h");
  // The one offload run has its host alone; the shared rate moves with it.
  ExpectRelativelyNear(p.cpu_adam_alone_params_per_s, truth.cpu_adam_alone_params_per_s, kTolerance, "cpu adam");
  ExpectRelativelyNear(p.cpu_adam_params_per_s, truth.cpu_adam_params_per_s, kTolerance, "cpu adam shared");
  ExpectRelativelyNear(p.step_overhead_s, truth.step_overhead_s, kTolerance, "step overhead");
  ASSERT_EQ(p.intra_node.all_gather.points.size(), truth.intra_node.all_gather.points.size());
  for (size_t i = 0; i < p.intra_node.all_gather.points.size(); ++i)
    ExpectRelativelyNear(p.intra_node.all_gather.points[i].second, truth.intra_node.all_gather.points[i].second,
                         kTolerance, "all-gather point " + std::to_string(i));
  EXPECT_TRUE(Curve(c, "collectives.intra_node.all_gather").fitted);
  ExpectRelativelyNear(Curve(c, "collectives.intra_node.reduce_scatter").scale, 1.0, kTolerance, "reduce-scatter");
  ExpectRelativelyNear(Curve(c, "collectives.intra_node.all_reduce").scale, 1.0, kTolerance, "all-reduce");
  EXPECT_FALSE(Curve(c, "collectives.inter_node.all_gather").fitted) << "no run spans nodes";
  // Measured peaks 4% above the prediction in one run, below in another.
  EXPECT_NEAR(p.memory_margin_fraction, 0.04, 1e-9);

  for (const auto* group : {&fitted, &held_out})
    for (const CalibrationRun& run : *group) {
      const Comparison before = CompareOnProfile(run, start), after = CompareOnProfile(run, p);
      EXPECT_GT(std::abs(before.step_time_s.error()), 0.05)
          << run.measured.dir << ": the starting profile is that far off";
      EXPECT_LT(std::abs(after.step_time_s.error()), 1e-3) << run.measured.dir;
    }
  EXPECT_EQ(p.name, "h200-sxm-calibrated");
  EXPECT_NE(p.source.find(fitted.front().measured.dir), std::string::npos);
  EXPECT_NE(p.source.find("llama3.2-1b"), std::string::npos);
}

// `llmplan run --kernel-trace` runs the profiler around one step, which then
// takes 1.7x as long on the host (measured on the 1B plan: 445 ms against
// 255). Neither a comparison nor a calibration may read that as the step's
// time or as host overhead.
TEST(CalibrationTest, KernelTracedStepIsLeftOutOfTheTimedSteps) {
  ScratchDir dir;
  const HardwareProfile start = Profile("h200-sxm"), truth = TrueProfile();
  std::vector<CalibrationRun> runs;
  for (const Plan& plan : FittedPlans()) {
    const StepProgram program = BuildStepProgram(plan, start);
    SyntheticRunOptions o;
    o.steps = 6;
    o.kernel_traced_step = 4;
    const std::string run_dir = dir.File("traced" + std::to_string(runs.size()));
    WriteSyntheticRun(run_dir, plan, program, SimulatedTimes(program, truth), o);
    runs.push_back(PrepareCalibrationRun(LoadMeasuredRun(run_dir), start));
    const auto timed = runs.back().measured.TimedSteps();
    ASSERT_EQ(timed.size(), 3u) << "steps 3, 5 and 6";
    for (const MeasuredStep* s : timed) EXPECT_NE(s->step, 4);
    EXPECT_LT(std::abs(CompareOnProfile(runs.back(), truth).step_time_s.error()), 1e-3) << run_dir;
  }
  const Calibration c = Calibrate(start, runs);
  ExpectRelativelyNear(c.profile.step_overhead_s, truth.step_overhead_s, 1e-3, "step overhead");
}

// CPU AdamW alone on the host and shared by two processes are two rates; a
// run of each kind fits each, and a run of one kind moves the other by the
// same factor (the ratio the profile measured stays).
TEST(CalibrationTest, FitsCpuAdamAloneAndSharedFromTheRunsThatRanThem) {
  ScratchDir dir;
  const HardwareProfile start = Profile("h200-sxm");
  ASSERT_NE(start.cpu_adam_alone_params_per_s, start.cpu_adam_params_per_s) << "h200-sxm measured both";
  HardwareProfile truth = start;
  truth.cpu_adam_alone_params_per_s *= 0.8;
  truth.cpu_adam_params_per_s *= 1.1;
  const Plan alone = PresetPlan("llama3.2-1b", 1, ShardingStrategy::kNoShard, 1, 1024, 1, {}, Offload::kOptimizer);
  const Plan shared = PresetPlan("llama3.2-1b", 2, ShardingStrategy::kNoShard, 1, 1024, 1, {}, Offload::kOptimizer);
  const Calibration both = Calibrate(start, Runs(dir, "both", {alone, shared}, truth, start));
  ExpectRelativelyNear(both.profile.cpu_adam_alone_params_per_s, truth.cpu_adam_alone_params_per_s, 1e-3, "alone");
  ExpectRelativelyNear(both.profile.cpu_adam_params_per_s, truth.cpu_adam_params_per_s, 1e-3, "shared");

  const Calibration one_gpu = Calibrate(start, Runs(dir, "one", {alone}, truth, start));
  ExpectRelativelyNear(one_gpu.profile.cpu_adam_alone_params_per_s, truth.cpu_adam_alone_params_per_s, 1e-3, "alone");
  ExpectRelativelyNear(one_gpu.profile.cpu_adam_params_per_s, start.cpu_adam_params_per_s * 0.8, 1e-3, "scaled");
  EXPECT_NE(Term(one_gpu, "host.cpu_adam_params_per_s").note.find("scaled"), std::string::npos);

  const Calibration two_gpu = Calibrate(start, Runs(dir, "two", {shared}, truth, start));
  ExpectRelativelyNear(two_gpu.profile.cpu_adam_params_per_s, truth.cpu_adam_params_per_s, 1e-3, "shared");
  ExpectRelativelyNear(two_gpu.profile.cpu_adam_alone_params_per_s, start.cpu_adam_alone_params_per_s * 1.1, 1e-3,
                       "scaled");
}

// collectives.slowdown_during_compute is measured by llmplan profile and
// kept: the curves are fitted to the share of each collective it leaves, so
// with the right slowdown they come back exactly, and a held-out run is
// predicted exactly. Without it, the curves absorb the contention.
TEST(CalibrationTest, KeepsTheMeasuredCollectiveSlowdownAndFitsTheCurvesToTheRest) {
  ScratchDir dir;
  HardwareProfile truth = TrueProfile();
  truth.collective_slowdown_during_compute = 0.4;
  HardwareProfile measured = Profile("h200-sxm");
  measured.collective_slowdown_during_compute = 0.4;
  const auto fitted = Runs(dir, "fit", FittedPlans(), truth, measured);
  const Calibration c = Calibrate(measured, fitted);
  const FittedTerm& kept = Term(c, "collectives.slowdown_during_compute");
  EXPECT_FALSE(kept.fitted);
  EXPECT_EQ(kept.after, 0.4);
  EXPECT_EQ(c.profile.collective_slowdown_during_compute, 0.4);
  EXPECT_NE(kept.note.find("measured by llmplan profile"), std::string::npos) << kept.note;
  for (size_t i = 0; i < truth.intra_node.all_gather.points.size(); ++i)
    ExpectRelativelyNear(c.profile.intra_node.all_gather.points[i].second,
                         truth.intra_node.all_gather.points[i].second, 1e-3, "all-gather point " + std::to_string(i));
  ExpectRelativelyNear(Curve(c, "collectives.intra_node.reduce_scatter").scale, 1.0, 1e-3, "reduce-scatter");
  for (const CalibrationRun& run : Runs(dir, "held", HeldOutPlans(), truth, measured))
    EXPECT_LT(std::abs(CompareOnProfile(run, c.profile).step_time_s.error()), 1e-3) << run.measured.dir;

  // A profile that did not measure it: kept at 0, and the reduce-scatters,
  // which run beside backward, come out slower than their curve.
  const Calibration unmeasured = Calibrate(Profile("h200-sxm"), Runs(dir, "zero", FittedPlans(), truth, Profile("h200-sxm")));
  EXPECT_EQ(unmeasured.profile.collective_slowdown_during_compute, 0);
  EXPECT_NE(Term(unmeasured, "collectives.slowdown_during_compute").note.find("did not measure"), std::string::npos);
  EXPECT_GT(Curve(unmeasured, "collectives.intra_node.reduce_scatter").scale, 1.01);
}

TEST(CalibrationTest, KeepsTermsTheRunsCannotIdentifyAndSaysWhy) {
  ScratchDir dir;
  const HardwareProfile start = Profile("h200-sxm"), truth = TrueProfile();
  // Programs stripped of attention: no op in any run exercises its rates.
  std::vector<CalibrationRun> runs;
  int i = 0;
  for (const Plan& plan : FittedPlans()) {
    StepProgram program = BuildStepProgram(plan, start);
    for (StepOp& op : program.ops) op.work.attention_flops = 0;
    const std::string run_dir = dir.File("run" + std::to_string(i++));
    WriteSyntheticRun(run_dir, plan, program, SimulatedTimes(program, truth));
    runs.push_back({LoadMeasuredRun(run_dir), program});
  }
  const Calibration c = Calibrate(start, runs);
  for (const char* field : {"compute.attention.forward_flops_per_s", "compute.attention.backward_flops_per_s"}) {
    const FittedTerm& t = Term(c, field);
    EXPECT_FALSE(t.fitted) << field;
    EXPECT_EQ(t.after, t.before) << field;
    EXPECT_NE(t.note.find("attention"), std::string::npos) << t.note;
  }
  EXPECT_EQ(c.profile.attention_forward_flops_per_s, start.attention_forward_flops_per_s);
  // The rest is still identified, and exactly.
  ExpectRelativelyNear(c.profile.gemm_max_efficiency, truth.gemm_max_efficiency, 1e-3, "gemm");
  ExpectRelativelyNear(c.profile.elementwise_efficiency, truth.elementwise_efficiency, 1e-3, "elementwise");
  EXPECT_TRUE(Term(c, "compute.gemm.max_efficiency").fitted);
}

TEST(CalibrationTest, OneShapeOfGemmLeavesTheHalfEfficiencyDimensionAlone) {
  ScratchDir dir;
  const HardwareProfile start = Profile("h200-sxm"), truth = TrueProfile();
  // One model, the smallest GEMM side always its hidden size.
  const auto runs = Runs(dir, "run",
                         {PresetPlan("llama3.2-1b", 1, ShardingStrategy::kFullShard, 1, 4096, 1),
                          PresetPlan("llama3.2-1b", 1, ShardingStrategy::kFullShard, 2, 4096, 2)},
                         truth, start);
  const Calibration c = Calibrate(start, runs);
  const FittedTerm& half = Term(c, "compute.gemm.half_efficiency_dim");
  EXPECT_FALSE(half.fitted);
  EXPECT_EQ(c.profile.gemm_half_efficiency_dim, start.gemm_half_efficiency_dim);
  EXPECT_NE(half.note.find("smallest side"), std::string::npos) << half.note;
  EXPECT_TRUE(Term(c, "compute.gemm.max_efficiency").fitted);
}

TEST(CalibrationTest, KernelOverheadStaysNonNegativeWhenTheDataPullBelowZero) {
  ScratchDir dir;
  const HardwareProfile start = Profile("h200-sxm");
  HardwareProfile truth = TrueProfile();
  truth.kernel_overhead_s = 0;
  truth.kernel_launch_s = 1e-9;  // no floor worth the name: the shortened ops are fitted as built
  const Plan plan = PresetPlan("llama3.2-1b", 1, ShardingStrategy::kFullShard, 1, 1024, 1);
  const StepProgram program = BuildStepProgram(plan, start);
  // Every compute op 1.5 us per kernel shorter than its work: the unconstrained
  // fit says kernel_overhead_s = -1.5e-6. One op after another, no overlap.
  const CostModel cost(truth);
  testing::SyntheticTimes t = SimulatedTimes(program, truth);
  double now = 0;
  for (const StepOp& op : program.ops) {
    double seconds = cost.Seconds(op);
    if (seconds > 0 && op.stream == StreamKind::kCompute) seconds -= 1.5e-6 * op.work.launches;
    t.spans[op.id] = {now, now + std::max(seconds, 0.0)};
    now = t.spans[op.id].end;
  }
  WriteSyntheticRun(dir.File("run"), plan, program, t);
  const Calibration c = Calibrate(start, {PrepareCalibrationRun(LoadMeasuredRun(dir.File("run")), start)});
  // An unconstrained fit of these exact times gives -1.5e-6 and the other
  // terms exactly; held at or above zero, the overhead ends near it and the
  // other terms absorb what they can.
  EXPECT_TRUE(Term(c, "compute.kernel_overhead_s").fitted);
  EXPECT_GE(c.profile.kernel_overhead_s, 0.0);
  EXPECT_LT(c.profile.kernel_overhead_s, 1.5e-7);
  EXPECT_GT(c.coefficients["compute"]["rms_relative_residual"].get<double>(), 1e-6) << "no exact non-negative fit";
}

TEST(CalibrationTest, NothingToFitIsAUserErrorNamingTheTerm) {
  ScratchDir dir;
  const HardwareProfile start = Profile("h200-sxm");
  const Plan plan = PresetPlan("tiny-llama", 1, ShardingStrategy::kFullShard, 1, 64, 1);
  const StepProgram program = BuildStepProgram(plan, start);
  testing::SyntheticTimes t = SimulatedTimes(program, start);
  for (OpTiming& span : t.spans) span = {0, 0};  // nothing measured a duration,
  for (double& issued : t.issued) issued = 0;    // nor the host's issue
  WriteSyntheticRun(dir.File("run"), plan, program, t);
  try {
    Calibrate(start, {PrepareCalibrationRun(LoadMeasuredRun(dir.File("run")), start)});
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("compute.gemm.max_efficiency"), std::string::npos) << e.what();
  }
}

TEST(CalibrationTest, RefusesRunsOfDifferentHardware) {
  ScratchDir dir;
  const HardwareProfile h200 = Profile("h200-sxm");
  Plan a = PresetPlan("tiny-llama", 1, ShardingStrategy::kFullShard, 1, 64, 1);
  Plan b = a;
  b.profile = "h100-sxm-80g";
  const StepProgram program = BuildStepProgram(a, h200);
  WriteSyntheticRun(dir.File("a"), a, program, SimulatedTimes(program, h200));
  WriteSyntheticRun(dir.File("b"), b, program, SimulatedTimes(program, h200));
  SyntheticRunOptions on_cpu;
  on_cpu.device = "cpu";
  WriteSyntheticRun(dir.File("c"), a, program, SimulatedTimes(program, h200), on_cpu);
  const MeasuredRun ra = LoadMeasuredRun(dir.File("a")), rb = LoadMeasuredRun(dir.File("b")),
                    rc = LoadMeasuredRun(dir.File("c"));
  EXPECT_NO_THROW(CheckOneKindOfHardware({&ra, &ra}, h200));
  try {
    CheckOneKindOfHardware({&ra, &rb}, h200);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("h100-sxm-80g"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CheckOneKindOfHardware({&rc}, h200), UserError);  // a CPU run says nothing about an H200

  Plan calibrated = a;
  calibrated.profile = "/some/dir/h200-sxm-calibrated.json";
  EXPECT_EQ(HardwareName(calibrated), "h200-sxm");
}

// Runs recorded on 1-2 H200 (tests/data/runs, tools/device/accuracy.sh): per
// machine, fitted on two or three and held out on two or three. The one-H200
// machine's runs (a*, fused kernels with the packed projections) are fitted on two models — Llama-3.2-1B (a01, and a12, which
// offloads the optimizer: gradients staged per unit, the CPU AdamW beside the
// next step's forward) and Qwen2.5-0.5B (a09) — and held out on a02, a03 and
// a13 (Llama-3.2-3B, optimizer offload, every block checkpointed). Fitted on
// Llama-3.2-1B alone, every block GEMM has one smallest side (2,048), so the
// fit cannot tell how efficiency falls with it: it set the half-efficiency
// dimension to 0 and Qwen2.5-0.5B (896) came out 8.9% too fast. The two-H200
// machine's offload run (b12) was recorded with the CPU AdamW after the
// backward, a program llmplan does not build now, and awaits that machine. Each
// machine's recorded runs calibrate its own profile: the one-H200 machine's
// and the two-H200 machine's (b*, LibTorch's composite ops) differ in their
// host CPUs (the CPU AdamW rate) and in the kernels the runs ran, so one
// profile fitted to both would be neither machine's.
TEST(CalibrationTest, RecordedH200RunsPredictHeldOutRunsWithinAFewPercent) {
  const HardwareProfile start = Profile("h200-sxm");
  auto load = [&](std::vector<std::string> names) {
    std::vector<CalibrationRun> runs;
    for (const std::string& name : names)
      runs.push_back(PrepareCalibrationRun(LoadMeasuredRun(testing::SourceDir() + "/tests/data/runs/" + name), start));
    return runs;
  };
  auto mape = [](const std::vector<CalibrationRun>& runs, const HardwareProfile& p, double* worst) {
    double sum = 0;
    for (const CalibrationRun& run : runs) {
      const double e = std::abs(CompareOnProfile(run, p).step_time_s.error());
      sum += e;
      *worst = std::max(*worst, e);
    }
    return sum / static_cast<double>(runs.size());
  };
  struct Machine {
    std::vector<std::string> fitted, held_out;
  };
  for (const Machine& m : {Machine{{"a01", "a09", "a12"}, {"a02", "a03", "a13"}},
                           Machine{{"b03", "b11"}, {"b06", "b10"}}}) {
    SCOPED_TRACE(m.fitted.front());
    const auto fitted = load(m.fitted);
    const auto held_out = load(m.held_out);
    const Calibration c = Calibrate(start, fitted);
    double worst_before = 0, worst_after = 0, worst_held = 0;
    const double before = mape(fitted, start, &worst_before), after = mape(fitted, c.profile, &worst_after);
    const double held = mape(held_out, c.profile, &worst_held);
    std::printf("%s..: fitted MAPE %.1f%% -> %.1f%% (worst %.1f%%), held out %.1f%% (worst %.1f%%)\n",
                m.fitted.front().c_str(), 100 * before, 100 * after, 100 * worst_after, 100 * held, 100 * worst_held);
    EXPECT_LT(after, before);
    EXPECT_LT(worst_after, 0.08);
    EXPECT_LT(held, 0.05);
    EXPECT_LT(worst_held, 0.08);
  }
}

}  // namespace
}  // namespace llmplan
