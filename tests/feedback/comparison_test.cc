// llmplan compare's numbers, against run directories written by hand from a
// real program: every measured op takes the simulated time x 1.25 and memory
// is the predicted timeline plus a known offset, so every error is known
// before the comparison is run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "feedback/compare_trace.h"
#include "feedback/comparison.h"
#include "feedback/comparison_format.h"
#include "feedback/measured_run.h"
#include "feedback/report_html.h"
#include "feedback/stream_use.h"
#include "base/user_error.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

constexpr double kSlower = 1.25;           // measured = predicted x 1.25: every time error is -20%
constexpr double kOffset = 3.0 * 1048576;  // measured memory = predicted + 3 MiB
constexpr double kBump = 1048576;          // one op's measured peak 1 MiB above the rest

Plan ShardedPlan() {
  Plan plan;
  plan.model = PresetModel("tiny-llama");
  plan.profile = "h200-sxm";
  plan.gpus = 2;
  plan.gpus_per_node = 8;
  plan.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(plan);
  plan.seq_len = 256;
  plan.micro_batch = 2;
  plan.grad_accum = 2;
  plan.checkpoint_layers = {0};
  plan.Validate();
  return plan;
}

// One GPU, the optimizer on the host: copies both ways and the CPU AdamW.
Plan OffloadPlan() {
  Plan plan = ShardedPlan();
  plan.gpus = 1;
  plan.strategy = ShardingStrategy::kNoShard;
  NormaliseGrouping(plan);
  plan.offload = Offload::kOptimizer;
  plan.checkpoint_layers = {};
  plan.Validate();
  return plan;
}

// How the hand-written run departs from the prediction.
struct FakeRun {
  int bumped_op = -1;           // this op's peak is kBump above every other (timed steps)
  bool extra_op = false;        // the program has one op more than the plan's
  bool torn_last_line = false;  // op_times.jsonl ends in half a line (a run killed mid-write)
  std::string memory_source = "cuda_caching_allocator";
};

std::string Line(const nlohmann::json& j) { return j.dump() + "\n"; }

// Writes a run directory for `ev` (evaluated from `plan`): 3 steps; the first
// (untimed) 3x slower and with a huge memory peak, steps 2 and 3 exactly
// kSlower x the simulation and kOffset above the predicted memory.
void WriteRun(const testing::ScratchDir& dir, const Plan& plan, const Evaluation& ev, const FakeRun& fake) {
  SavePlan(plan, dir.File("plan.json"));
  nlohmann::json program = StepProgramJson(ev.program);
  nlohmann::json& ops = program["ops"];
  if (fake.extra_op)
    ops.push_back({{"id", ops.size()},
                   {"name", "mystery op"},
                   {"kind", "forward"},
                   {"stream", "compute"},
                   {"unit", -1},
                   {"micro_batch", -1}});
  dir.Write("program.json", program.dump());

  const size_t n = ops.size();
  const MemoryTimeline& mem = ev.memory;
  std::string times, metrics;
  for (int step = 1; step <= 3; ++step) {
    const double scale = step == 1 ? 3.0 : kSlower;
    std::vector<double> start(n), end(n), issued(n), allocated(n), reserved(n), peak(n), peak_reserved(n);
    for (size_t i = 0; i < n; ++i) {
      const bool real = i < ev.program.ops.size();
      start[i] = real ? ev.simulation.ops[i].start * scale : 0;
      end[i] = real ? ev.simulation.ops[i].end * scale : 0;
      issued[i] = start[i];
      allocated[i] = (real ? mem.after_op[i] : 0) + kOffset;
      peak[i] = (real ? mem.peak_in_op[i] : 0) + kOffset;
      if (static_cast<int>(i) == fake.bumped_op) peak[i] = mem.peak + kOffset + kBump;
      if (step == 1 && i == 0) peak[i] = 10 * mem.peak;  // the first step is not timed
      reserved[i] = allocated[i];
      peak_reserved[i] = peak[i];
    }
    times += Line({{"step", step},
                   {"start_s", start},
                   {"end_s", end},
                   {"issued_s", issued},
                   {"allocated", allocated},
                   {"reserved", reserved},
                   {"peak_allocated", peak},
                   {"peak_reserved", peak_reserved},
                   {"memory_source", fake.memory_source}});
    const double step_peak = step == 1 ? 10 * mem.peak : mem.peak + kOffset + (fake.bumped_op >= 0 ? kBump : 0);
    metrics += Line({{"step", step},
                     {"loss", 6.0 - step},
                     {"step_s", ev.estimate.time.step_seconds * scale},
                     {"tokens_per_s_per_gpu", ev.estimate.tokens_per_second_per_gpu / scale},
                     {"mfu", ev.estimate.mfu / scale},
                     {"peak_allocated_bytes", step_peak},
                     {"peak_reserved_bytes", ev.estimate.memory.peak_reserved_bytes + (step == 1 ? 1e12 : kOffset)}});
  }
  if (fake.torn_last_line) {
    times += R"({"step": 4, "start_s": [0.1, 0.2)";  // no newline: the process died here
    metrics += Line({{"step", 4}, {"loss", 1.0}, {"step_s", 1.0}});
  }
  dir.Write("op_times.jsonl", times);
  dir.Write("metrics.jsonl", metrics);
  dir.Write("summary.json", nlohmann::json{{"device", "cuda:0"}}.dump());
}

const OpClassComparison* FindClass(const Comparison& c, const std::string& name) {
  for (const auto& k : c.classes)
    if (k.name == name) return &k;
  return nullptr;
}

std::vector<std::string> ClassNames(const Comparison& c) {
  std::vector<std::string> names;
  for (const auto& k : c.classes) names.push_back(k.name);
  return names;
}

void ExpectEveryTimeTwentyPercentFast(const Comparison& c) {
  for (const OpClassComparison& k : c.classes) {
    SCOPED_TRACE(k.name);
    ASSERT_GT(k.seconds.predicted, 0);
    EXPECT_NEAR(k.seconds.measured, kSlower * k.seconds.predicted, 1e-12 * k.seconds.measured);
    EXPECT_NEAR(k.seconds.error(), -0.2, 1e-9);
  }
  EXPECT_NEAR(c.step_time_s.error(), -0.2, 1e-9);
  EXPECT_NEAR(c.device_step_s.error(), -0.2, 1e-9);
  // Rates are 1/1.25 of the prediction: +25%.
  EXPECT_NEAR(c.tokens_per_s_per_gpu.error(), 0.25, 1e-9);
  EXPECT_NEAR(c.mfu.error(), 0.25, 1e-9);
}

TEST(ComparisonTest, ShardedRunErrorsAreTheKnownOnes) {
  testing::ScratchDir dir;
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  WriteRun(dir, plan, ev, {});
  const MeasuredRun run = LoadMeasuredRun(dir.path().string());
  const Comparison c = Compare(run, ev, profile);

  EXPECT_EQ(c.steps, 3);
  EXPECT_EQ(c.timed_steps, 2);
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_EQ(c.memory_source, "cuda_caching_allocator");
  EXPECT_EQ(ClassNames(c), (std::vector<std::string>{"forward_blocks", "backward_blocks", "recompute",
                                                     "head_forward_loss", "head_backward", "embedding", "all_gather",
                                                     "reduce_scatter", "grad_norm_all_reduce", "loss_all_reduce",
                                                     "grad_sums", "norm_and_clip", "gpu_optimizer", "compute_idle"}));
  ExpectEveryTimeTwentyPercentFast(c);
  // Two GPUs on the h200 profile: the first all-gather is not hidden.
  ASSERT_GT(ev.simulation.exposed_communication_seconds, 0);
  EXPECT_NEAR(c.exposed_communication_s.error(), -0.2, 1e-9);

  // Memory: predicted P, measured P + 3 MiB, so the error is -3 MiB / (P + 3 MiB).
  const double p = ev.estimate.memory.peak_allocated_bytes;
  EXPECT_DOUBLE_EQ(c.peak_allocated_bytes.predicted, p);
  EXPECT_DOUBLE_EQ(c.peak_allocated_bytes.measured, p + kOffset);
  EXPECT_NEAR(c.peak_allocated_bytes.error(), -kOffset / (p + kOffset), 1e-12);
  EXPECT_NEAR(c.peak_reserved_bytes.error(), -kOffset / (ev.estimate.memory.peak_reserved_bytes + kOffset), 1e-12);
  // The peak is reached during the same op on both sides.
  ASSERT_GE(ev.memory.peak_op, 0);
  EXPECT_EQ(c.predicted_peak.op, ev.memory.peak_op);
  EXPECT_EQ(c.measured_peak.op, ev.memory.peak_op);
  EXPECT_EQ(c.measured_peak.name, ev.program.ops[ev.memory.peak_op].name);

  // Pictures: both timelines by op id, the loss of every step.
  EXPECT_EQ(c.predicted_allocated, ev.memory.after_op);
  ASSERT_EQ(c.measured_allocated.size(), ev.program.ops.size());
  EXPECT_DOUBLE_EQ(c.measured_allocated[5], ev.memory.after_op[5] + kOffset);
  EXPECT_EQ(c.representative_step, 3);
  EXPECT_EQ(c.losses, (std::vector<std::pair<int64_t, double>>{{1, 5.0}, {2, 4.0}, {3, 3.0}}));
}

TEST(ComparisonTest, OffloadRunHasCopiesAndTheCpuOptimizer) {
  testing::ScratchDir dir;
  const Plan plan = OffloadPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  WriteRun(dir, plan, ev, {});
  const Comparison c = Compare(LoadMeasuredRun(dir.path().string()), ev, profile);
  for (const char* name : {"copy_to_device", "copy_to_host", "cpu_optimizer", "grad_sums"})
    EXPECT_NE(FindClass(c, name), nullptr) << name;
  EXPECT_EQ(FindClass(c, "gpu_optimizer"), nullptr);
  ExpectEveryTimeTwentyPercentFast(c);
}

TEST(ComparisonTest, ComputeClassesCarryTheCostModelSplit) {
  testing::ScratchDir dir;
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  WriteRun(dir, plan, ev, {});
  const Comparison c = Compare(LoadMeasuredRun(dir.path().string()), ev, profile);
  const OpClassComparison* forward = FindClass(c, "forward_blocks");
  ASSERT_NE(forward, nullptr);
  ASSERT_TRUE(forward->has_split);
  EXPECT_GT(forward->split.gemm_s, 0);
  EXPECT_GT(forward->split.attention_s, 0);
  EXPECT_GT(forward->split.memory_bound_s, 0);
  // The terms and what the simulator added make up the predicted seconds.
  const PredictedSplit& s = forward->split;
  EXPECT_NEAR(s.gemm_s + s.attention_s + s.memory_bound_s + s.kernel_overhead_s + s.launch_wait_s + s.contention_s,
              forward->seconds.predicted, 1e-12);
  // Collectives among 2 GPUs are not compute: no split.
  EXPECT_FALSE(FindClass(c, "reduce_scatter")->has_split);
  EXPECT_FALSE(FindClass(c, "compute_idle")->has_split);
}

TEST(ComparisonTest, MeasuredPeakOpIsTheHighestOfTheTimedSteps) {
  testing::ScratchDir dir;
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  // An op well before the predicted peak measures 1 MiB above it; op 0's huge
  // peak in the untimed first step is ignored.
  const int bumped = 3;
  ASSERT_NE(bumped, ev.memory.peak_op);
  WriteRun(dir, plan, ev, {.bumped_op = bumped});
  const Comparison c = Compare(LoadMeasuredRun(dir.path().string()), ev, profile);
  EXPECT_EQ(c.measured_peak.op, bumped);
  EXPECT_EQ(c.measured_peak.name, ev.program.ops[bumped].name);
  EXPECT_EQ(c.predicted_peak.op, ev.memory.peak_op);
  const double p = ev.memory.peak;
  EXPECT_NEAR(c.peak_allocated_bytes.error(), -(kOffset + kBump) / (p + kOffset + kBump), 1e-12);
  const nlohmann::json j = ComparisonToJson(c);
  EXPECT_EQ(j["peak_op"]["measured"], ev.program.ops[bumped].name);
  EXPECT_EQ(j["peak_op"]["predicted"], ev.program.ops[ev.memory.peak_op].name);
}

TEST(ComparisonTest, RunOfAnotherProgramIsRefused) {
  testing::ScratchDir dir;
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  WriteRun(dir, plan, ev, {.extra_op = true});
  const MeasuredRun run = LoadMeasuredRun(dir.path().string());
  try {
    Compare(run, ev, profile);
    FAIL() << "a run with an extra op was compared";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("ops"), std::string::npos) << e.what();
  }
}

TEST(ComparisonTest, TornLastLineIsIgnored) {
  testing::ScratchDir dir;
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  WriteRun(dir, plan, ev, {.torn_last_line = true});
  const Comparison c = Compare(LoadMeasuredRun(dir.path().string()), ev, profile);
  EXPECT_EQ(c.steps, 3);
  EXPECT_EQ(c.timed_steps, 2);
  ExpectEveryTimeTwentyPercentFast(c);
}

// Spans by hand: compute [0,2] and [3,5]; an all-gather [1,4] is hidden
// except for [2,3]; a reduce [6,7] runs alone; a host->device copy [8,8.5]
// overlaps only CPU work [7,9], which is not compute.
TEST(StreamUseTest, ExposedCommunicationFromSpansByHand) {
  StepProgram program;
  const std::vector<std::pair<StreamKind, OpTiming>> spans_by_op = {
      {StreamKind::kCompute, {0, 2}}, {StreamKind::kGather, {1, 4}}, {StreamKind::kCompute, {3, 5}},
      {StreamKind::kReduce, {6, 7}},  {StreamKind::kCpu, {7, 9}},    {StreamKind::kHostToDevice, {8, 8.5}},
      {StreamKind::kCompute, {5, 5}},  // a release: no time
  };
  std::vector<OpTiming> spans;
  for (const auto& [stream, span] : spans_by_op) {
    StepOp op;
    op.id = static_cast<int>(program.ops.size());
    op.stream = stream;
    program.ops.push_back(op);
    spans.push_back(span);
  }
  const StreamUse use = MeasureStreamUse(program, spans);
  EXPECT_DOUBLE_EQ(use.compute_busy, 4.0);
  EXPECT_DOUBLE_EQ(use.exposed_communication, 1.0 + 1.0 + 0.5);
}

// The same definitions as the simulator's own integration.
TEST(StreamUseTest, AgreesWithTheSimulator) {
  const HardwareProfile profile = testing::Profile("h200-sxm");
  for (const Plan& plan : {ShardedPlan(), OffloadPlan()}) {
    const Evaluation ev = EvaluatePlanInDetail(plan, profile);
    const StreamUse use = MeasureStreamUse(ev.program, ev.simulation.ops);
    EXPECT_NEAR(use.exposed_communication, ev.simulation.exposed_communication_seconds, 1e-12);
    EXPECT_NEAR(use.compute_busy, ev.simulation.busy_seconds[static_cast<int>(StreamKind::kCompute)], 1e-12);
  }
}

TEST(ComparisonTest, ErrorIsSignedAndNaNWhenNothingWasMeasured) {
  EXPECT_DOUBLE_EQ(RelativeError(1.0, 1.25), -0.2);
  EXPECT_DOUBLE_EQ(RelativeError(1.5, 1.0), 0.5);
  EXPECT_EQ(RelativeError(0, 0), 0);
  EXPECT_TRUE(std::isnan(RelativeError(1, 0)));
  EXPECT_EQ(FormatError(-0.2), "-20.0%");
  EXPECT_EQ(FormatError(0.034), "+3.4%");
  EXPECT_EQ(FormatError(RelativeError(1, 0)), "n/a");
}

TEST(ComparisonTest, JsonContract) {
  testing::ScratchDir dir;
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  WriteRun(dir, plan, ev, {});
  const nlohmann::json j = ComparisonToJson(Compare(LoadMeasuredRun(dir.path().string()), ev, profile));
  for (const char* key : {"step_time_s", "device_step_s", "exposed_communication_s", "tokens_per_s_per_gpu", "mfu",
                          "peak_allocated_bytes", "peak_reserved_bytes"}) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(j.contains(key));
    EXPECT_TRUE(j[key]["predicted"].is_number());
    EXPECT_TRUE(j[key]["measured"].is_number());
    EXPECT_TRUE(j[key]["error"].is_number());
  }
  EXPECT_NEAR(j["step_time_s"]["error"].get<double>(), -0.2, 1e-9);
  EXPECT_EQ(j["run"]["dir"], dir.path().string());
  EXPECT_EQ(j["run"]["steps"], 3);
  EXPECT_EQ(j["run"]["timed_steps"], 2);
  EXPECT_EQ(j["run"]["memory_source"], "cuda_caching_allocator");
  EXPECT_EQ(j["profile"], profile.name);
  ASSERT_TRUE(j["classes"].is_array());
  for (const auto& k : j["classes"]) {
    EXPECT_TRUE(k["name"].is_string());
    EXPECT_TRUE(k["predicted_s"].is_number());
    EXPECT_TRUE(k["measured_s"].is_number());
    EXPECT_NEAR(k["error"].get<double>(), -0.2, 1e-9) << k;
  }
  EXPECT_TRUE(j["classes"][0].contains("predicted_split"));
}

TEST(ComparisonReportTest, SelfContainedEscapedHtml) {
  testing::ScratchDir dir;
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  WriteRun(dir, plan, ev, {});
  Comparison c = Compare(LoadMeasuredRun(dir.path().string()), ev, profile);
  c.plan.model.name = "<script>alert(\"x\")</script>";
  c.run_dir = "runs/a&b";
  const std::string path = dir.File("report.html");
  WriteComparisonReport(c, path);
  const std::string html = testing::ReadFile(path);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&quot;x&quot;)"), std::string::npos);
  EXPECT_NE(html.find("runs/a&amp;b"), std::string::npos);
  // Three charts, nothing fetched from elsewhere.
  size_t charts = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++charts;
  EXPECT_EQ(charts, 3u);
  for (const char* outside : {"http://www.w3.org/1999", "https://", "src=", "@import", "url("})
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  // The step time, both sides, and its error.
  for (const SummaryRow& r : StepRows(c)) {
    EXPECT_NE(html.find(r.predicted), std::string::npos) << r.label;
    EXPECT_NE(html.find(r.measured), std::string::npos) << r.label;
  }
  EXPECT_NE(html.find("-20.0%"), std::string::npos);
  EXPECT_NE(html.find(c.measured_peak.name), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_THROW(WriteComparisonReport(c, dir.File("no/such/dir/report.html")), UserError);
}

// LibTorch 2.x on the CPU measures the process's RSS: still compared, and said so.
TEST(ComparisonReportTest, ProcessRssIsNamedAsSuch) {
  testing::ScratchDir dir;
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  WriteRun(dir, plan, ev, {.memory_source = "process_peak_rss"});
  const Comparison c = Compare(LoadMeasuredRun(dir.path().string()), ev, profile);
  EXPECT_EQ(c.memory_source, "process_peak_rss");
  EXPECT_NEAR(c.peak_allocated_bytes.error(), -kOffset / (ev.memory.peak + kOffset), 1e-12);
  EXPECT_NE(DescribeMemorySource(c.memory_source).find("resident"), std::string::npos);
  EXPECT_NE(ComparisonReportHtml(c).find("resident memory (RSS)"), std::string::npos);
  EXPECT_EQ(ComparisonToJson(c)["run"]["memory_source"], "process_peak_rss");
}

TEST(ComparisonReportTest, TraceHasBothProcessesWithTheSameTracks) {
  const Plan plan = ShardedPlan();
  const HardwareProfile profile = testing::Profile("h200-sxm");
  const Evaluation ev = EvaluatePlanInDetail(plan, profile, true);
  testing::ScratchDir dir;
  WriteRun(dir, plan, ev, {});
  const MeasuredRun run = LoadMeasuredRun(dir.path().string());
  const nlohmann::json trace = SideBySideTrace(ev, *run.TimedSteps().back()).ToJson();
  std::map<int, std::string> process;
  std::map<int, std::set<std::string>> tracks;
  std::map<int, int> spans;
  for (const auto& e : trace["traceEvents"]) {
    const int pid = e["pid"];
    if (e["ph"] == "M" && e["name"] == "process_name") process[pid] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[pid].insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") ++spans[pid];
  }
  EXPECT_EQ(process[1], "predicted");
  EXPECT_EQ(process[2], "measured");
  EXPECT_EQ(tracks[1], tracks[2]);
  EXPECT_TRUE(tracks[1].count("compute"));
  EXPECT_EQ(spans[1], spans[2]);
  EXPECT_GT(spans[1], 0);
}

}  // namespace
}  // namespace llmplan
