// What `llmplan run` reports beyond the steps (issue 14), on real CPU runs
// with Gloo ranks: GPU-hours are world size x the run's wall time, dollars
// are GPU-hours x the price, the projection reaches 0 at the target, a
// resumed run continues its total; every rank's peak memory is in the
// summary, also the peak of a rank that died; a slow batch source makes the
// trainer warn that the loader is the bottleneck, one late batch does not.
// The arithmetic alone: run_cost_test.cc.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "executor/run/rank_peaks.h"
#include "executor/run/trainer.h"
#include "planner/plan.h"
#include "tests/cli_runner.h"
#include "tests/executor/run_test_support.h"
#include "tests/executor/core_test_support.h"
#include "tests/executor/rank_processes.h"
#include "tests/executor/gloo_skip.h"

namespace llmplan::executor {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::RunLlmplan;

nlohmann::json ReadJson(const std::string& path) { return nlohmann::json::parse(std::ifstream(path)); }

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

class RunReportingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_run_reporting_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A tiny-llama plan for `gpus` CPU ranks (full_shard when several), and raw uint16 tokens.
  void MakePlanAndData(int gpus) {
    Plan plan = executor_test::TinyCpuPlan(gpus);
    SavePlan(plan, Path("plan.json"));
    tokens_per_step_ = plan.TokensPerStep();
    std::vector<uint16_t> tokens(20'000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7 % 200);
    std::ofstream(Path("tokens.u16"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  std::string Run(const std::string& out, int steps, const std::string& extra) const {
    return "run --plan " + Path("plan.json") + " --data " + Path("tokens.u16") + " --steps " + std::to_string(steps) +
           " --out " + Path(out) + " --cpu --no-final-weights " + extra;
  }
  fs::path dir_;
  int64_t tokens_per_step_ = 0;
};

TEST_F(RunReportingTest, TwoRanksReportGpuHoursDollarsProjectionAndEveryRanksPeak) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  MakePlanAndData(2);
  const auto start = std::chrono::steady_clock::now();
  // $1000 a rank-hour: a few seconds of two ranks cost whole dollars.
  const CommandResult r = RunLlmplan(Run("run", 4, "--cpu-ranks 2 --price 1000"));
  const double outside_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json s = ReadJson(Path("run/summary.json"));
  const std::vector<nlohmann::json> steps = ReadLines(Path("run/metrics.jsonl"));
  ASSERT_EQ(steps.size(), 4u);

  // GPU-hours: two ranks for the run's whole wall time, which holds every
  // step and lies within the command's.
  const double total_s = s["total_s"], gpu_hours = s["gpu_hours"];
  EXPECT_NEAR(gpu_hours * 3600, 2 * total_s, 1e-6 * total_s) << s;
  double steps_s = 0;
  for (const auto& j : steps) steps_s += j["step_s"].get<double>();
  EXPECT_GT(total_s, steps_s);
  EXPECT_LT(total_s, outside_s);
  // Dollars: hours x price, now and projected.
  EXPECT_DOUBLE_EQ(s["price_per_gpu_hour"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(s["cost_usd"].get<double>(), gpu_hours * 1000);
  EXPECT_DOUBLE_EQ(s["projected_cost_usd"].get<double>(), s["projected_gpu_hours"].get<double>() * 1000);
  EXPECT_EQ(s["earlier_gpu_hours"], 0.0);

  // Per step: the total grows, dollars follow it, the projection aims at
  // --steps x tokens per step and reaches it at the last step.
  double previous = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const nlohmann::json& j = steps[i];
    const double hours = j["gpu_hours"];
    EXPECT_GT(hours, previous) << j;
    EXPECT_LT(hours, gpu_hours) << j;
    previous = hours;
    EXPECT_DOUBLE_EQ(j["cost_usd"].get<double>(), hours * 1000) << j;
    EXPECT_EQ(j["target_tokens"], 4 * tokens_per_step_) << j;
    EXPECT_EQ(j["tokens_done"], static_cast<int64_t>(i + 1) * tokens_per_step_) << j;
    EXPECT_NEAR(j["projected_gpu_hours"].get<double>(), hours + 2 * j["eta_s"].get<double>() / 3600, 1e-12) << j;
    if (i + 1 < steps.size()) EXPECT_GT(j["eta_s"].get<double>(), 0) << j;
    EXPECT_GT(j["predicted_tokens_per_s_per_gpu"].get<double>(), 0) << j;
  }
  EXPECT_EQ(steps.back()["eta_s"], 0.0);
  EXPECT_GT(s["predicted_tokens_per_s_per_gpu"].get<double>(), 0);
  EXPECT_NEAR(s["tokens_per_s_per_gpu_vs_predicted"].get<double>(),
              s["mean_tokens_per_s_per_gpu"].get<double>() / s["predicted_tokens_per_s_per_gpu"].get<double>(), 1e-9);

  // Every rank's peak, rank 0's the summary's own.
  ASSERT_EQ(s["rank_peaks"].size(), 2u) << s;
  EXPECT_TRUE(s["ranks_without_peaks"].empty()) << s;
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json& p = s["rank_peaks"][rank];
    EXPECT_EQ(p["rank"], rank);
    EXPECT_GT(p["peak_allocated_bytes"].get<int64_t>(), 0) << p;
    EXPECT_GE(p["step"].get<int64_t>(), 1) << p;
  }
  EXPECT_EQ(s["rank_peaks"][0]["peak_allocated_bytes"], s["peak_allocated_bytes"]);
  EXPECT_GE(s["peak_imbalance"]["max_over_min"].get<double>(), 1.0) << s;

  // The console says it, per rank (a CPU rank is not a GPU), with dollars.
  EXPECT_NE(r.output.find("tok/s/rank ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("% of plan)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" rank-h $"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("at $1000/rank-h"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak by rank: highest rank "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("GPU-h"), std::string::npos) << r.output;
}

TEST_F(RunReportingTest, WithoutAPriceTheRunSaysSoOnceAndReportsHoursOnly) {
  MakePlanAndData(1);  // the cpu profile has no price
  const CommandResult r = RunLlmplan(Run("run", 3, "--target-tokens " + std::to_string(10 * tokens_per_step_)));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string note = "no price per rank-hour";
  ASSERT_NE(r.output.find(note), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(note, r.output.find(note) + 1), std::string::npos) << "said once: " << r.output;
  EXPECT_EQ(r.output.find('$'), std::string::npos) << r.output;
  const nlohmann::json s = ReadJson(Path("run/summary.json"));
  EXPECT_FALSE(s.contains("cost_usd")) << s;
  EXPECT_GT(s["gpu_hours"].get<double>(), 0);
  // 3 of the 10 target steps done: 7 to go at the measured pace.
  EXPECT_EQ(s["target_tokens"], 10 * tokens_per_step_);
  EXPECT_GT(s["eta_s"].get<double>(), 0);
  EXPECT_NE(r.output.find("to " + std::to_string(10 * tokens_per_step_) + " tokens: eta "), std::string::npos)
      << r.output;
}

TEST_F(RunReportingTest, AResumedRunContinuesItsGpuHours) {
  MakePlanAndData(1);
  const std::string ckpt = " --ckpt-dir " + Path("ckpt");
  const CommandResult first = RunLlmplan(Run("run", 2, ckpt));
  ASSERT_EQ(first.status, 0) << first.output;
  const double first_hours = ReadJson(Path("run/summary.json"))["gpu_hours"];
  const CommandResult second = RunLlmplan(Run("run", 4, ckpt + " --resume"));
  ASSERT_EQ(second.status, 0) << second.output;
  const nlohmann::json s = ReadJson(Path("run/summary.json"));
  EXPECT_DOUBLE_EQ(s["earlier_gpu_hours"].get<double>(), first_hours);
  EXPECT_NEAR(s["gpu_hours"].get<double>(), first_hours + s["total_s"].get<double>() / 3600, 1e-12) << s;
  const std::vector<nlohmann::json> steps = ReadLines(Path("run/metrics.jsonl"));
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_GT(steps[2]["gpu_hours"].get<double>(), first_hours) << "step 3 continues the total, not from 0";
  EXPECT_NE(second.output.find("of them by earlier attempts"), std::string::npos) << second.output;
}

// The pid of the process whose environment holds `tag` and RANK=`rank`, or -1.
pid_t FindRank(const std::string& tag, int rank) {
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
    if (pid <= 0) continue;
    const std::string env = executor_test::ReadText(e.path().string() + "/environ");
    bool tagged = false, ranked = false;
    for (size_t begin = 0, end; begin < env.size(); begin = end + 1) {
      end = env.find('\0', begin);
      if (end == std::string::npos) end = env.size();
      const std::string var = env.substr(begin, end - begin);
      tagged = tagged || var == tag;
      ranked = ranked || var == "RANK=" + std::to_string(rank);
    }
    if (tagged && ranked) return pid;
  }
  return -1;
}

TEST_F(RunReportingTest, ARankThatDiesLeavesItsPeakInTheFailedRunsSummary) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // Rank 1 is killed mid-run (SIGKILL: it writes nothing more); rank 0's
  // next collective fails, and the failed run's summary still lists rank 1's
  // peak, from the file rank 1 left. A gather at the end would have lost it.
  MakePlanAndData(2);
  std::vector<uint16_t> tokens(400'000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7 % 200);
  std::ofstream(Path("tokens.u16"), std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  const std::string tag = "LLMPLAN_RUN_REPORTING_TEST_TAG=" + std::to_string(::getpid());
  const std::string command = "env " + tag + " LLMPLAN_COLLECTIVE_TIMEOUT_S=20 " + std::string(LLMPLAN_BINARY) + " " +
                              Run("run", 100000, "--cpu-ranks 2") + " > " + Path("log.txt") + " 2>&1";
  int status = -1;
  std::thread run([&] { status = std::system(command.c_str()); });
  const std::string rank1_file = Path("run/" + RankPeakFileName(1));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!fs::exists(rank1_file) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t rank1 = FindRank(tag, 1);
  if (rank1 > 0) ::kill(rank1, SIGKILL);
  run.join();
  const std::string output = executor_test::ReadText(Path("log.txt"));
  ASSERT_TRUE(fs::exists(rank1_file)) << output;
  ASSERT_GT(rank1, 0) << output;
  EXPECT_NE(status, 0) << output;
  const nlohmann::json left = ReadJson(rank1_file);
  const nlohmann::json s = ReadJson(Path("run/summary.json"));
  EXPECT_EQ(s["status"], "failed") << s;
  ASSERT_EQ(s["rank_peaks"].size(), 2u) << s;
  EXPECT_EQ(s["rank_peaks"][1]["rank"], 1);
  EXPECT_EQ(s["rank_peaks"][1]["peak_allocated_bytes"], left["peak_allocated_bytes"]);
  EXPECT_GT(left["peak_allocated_bytes"].get<int64_t>(), 0);
}

// A batch source that takes `delay` per micro-batch: a loader that cannot
// keep up.
class SlowBatches : public BatchSource {
 public:
  SlowBatches(const Plan& plan, std::chrono::milliseconds delay)
      : inner_(plan.micro_batch, plan.seq_len, 64, 5), delay_(delay) {}
  at::Tensor Next() override {
    std::this_thread::sleep_for(delay_);
    return inner_.Next();
  }
  int64_t position() const override { return inner_.position(); }
  void Seek(int64_t next_sample) override { inner_.Seek(next_sample); }

 private:
  testing::PatternBatches inner_;
  std::chrono::milliseconds delay_;
};

// Every metrics line has the rank's host memory; a run that leaks host
// memory (16 MiB a step, on purpose) says so once, with the rate, and its
// summary keeps it; the same run without the leak says nothing.
TEST_F(RunReportingTest, HostMemoryIsInEveryLineAndALeakIsNamedOnceWithItsRate) {
  MakePlanAndData(1);
  CommandResult plain = RunLlmplan(Run("plain", 60, ""));
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(plain.output.find("host memory keeps growing"), std::string::npos) << plain.output;
  for (const nlohmann::json& line : ReadLines(Path("plain/metrics.jsonl"))) {
    EXPECT_GT(line["host_anon_rss_bytes"].get<int64_t>(), 1 << 20) << line.dump();
    EXPECT_EQ(line["pinned_host_bytes"].get<int64_t>(), 0) << line.dump();  // nothing offloaded
  }
  EXPECT_TRUE(nlohmann::json::parse(std::ifstream(Path("plain/summary.json")))["host_memory_growth"].is_null());

  ::setenv("LLMPLAN_TEST_LEAK_MIB_PER_STEP", "16", 1);
  CommandResult leaking = RunLlmplan(Run("leaking", 60, ""));
  ::unsetenv("LLMPLAN_TEST_LEAK_MIB_PER_STEP");
  ASSERT_EQ(leaking.status, 0) << leaking.output;
  const std::string warning = "llmplan: warning: host memory keeps growing: ";
  const size_t at = leaking.output.find(warning);
  ASSERT_NE(at, std::string::npos) << leaking.output;
  EXPECT_EQ(leaking.output.find(warning, at + 1), std::string::npos) << "once: " << leaking.output;
  EXPECT_NE(leaking.output.find("+16.0 MiB a step", at), std::string::npos) << leaking.output;
  const nlohmann::json growth = nlohmann::json::parse(std::ifstream(Path("leaking/summary.json")))["host_memory_growth"];
  ASSERT_TRUE(growth.is_object()) << growth.dump();
  EXPECT_NEAR(growth["bytes_per_step"].get<double>(), 16.0 * (1 << 20), 1.0 * (1 << 20));
  EXPECT_GT(growth["to_bytes"].get<int64_t>(), growth["from_bytes"].get<int64_t>());
}

TEST(LoaderBottleneckTest, ASlowLoaderIsNamedOnceAndCounted) {
  TrainConfig config = testing::ConfigFor(testing::TestPlan("tiny-llama", 1, 1, 16));
  config.steps = 8;
  config.device = "cpu";
  config.progress = false;
  config.loader_workers = 2;  // named in the advice
  // A step of this plan takes a few ms on the CPU; 100 ms per batch is
  // nearly all of every step.
  SlowBatches slow(config.plan, std::chrono::milliseconds(100));
  ::testing::internal::CaptureStderr();
  const RunSummary s = Train(config, slow);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.loader_bound_steps, 7) << "every step but the first";
  EXPECT_GT(s.data_wait_fraction, 0.5);
  // Judged once three steps after the first are in: steps 2-4.
  const std::string warning = "for batches: the data loader is the bottleneck (--loader-workers 2, --loader-prefetch 4)";
  ASSERT_NE(err.find("llmplan: warning: steps 2-4 waited 0.3"), std::string::npos) << err;
  ASSERT_NE(err.find(warning), std::string::npos) << err;
  EXPECT_EQ(err.find(warning, err.find(warning) + 1), std::string::npos) << "once in 100 steps: " << err;
}

TEST(LoaderBottleneckTest, OneLateBatchIsNotABottleneck) {
  // One batch late by 40% of a step (the loader's thread descheduled on a
  // busy host): that step waited, the run did not.
  TrainConfig config = testing::ConfigFor(testing::TestPlan("tiny-llama", 4, 1, 128));
  config.steps = 12;
  config.device = "cpu";
  config.progress = false;
  class OneLate : public SlowBatches {
   public:
    using SlowBatches::SlowBatches;
    at::Tensor Next() override {
      // The time between calls is a step's: late by 40% of the last one.
      const auto now = std::chrono::steady_clock::now();
      if (++calls_ == 11) std::this_thread::sleep_for((now - last_) * 4 / 10);
      last_ = std::chrono::steady_clock::now();
      return SlowBatches::Next();
    }

   private:
    int calls_ = 0;
    std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  } late(config.plan, std::chrono::milliseconds(0));
  ::testing::internal::CaptureStderr();
  const RunSummary s = Train(config, late);
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("bottleneck"), std::string::npos);
  EXPECT_GE(s.loader_bound_steps, 1) << "the late step is counted";
}

}  // namespace
}  // namespace llmplan::executor
