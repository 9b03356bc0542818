// The pieces of a run's report that need no run: the cost arithmetic
// (GPU-hours, dollars, the projection), the rank peak files and their
// imbalance, and the GPU-hours an earlier run in a directory recorded. The
// same on real runs: run_reporting_test.cc.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "executor/run/rank_peaks.h"
#include "executor/run/run_cost.h"
#include "executor/run/run_directory.h"

namespace llmplan::executor {
namespace {

namespace fs = std::filesystem;

// --- the arithmetic ---

TEST(CostMeterTest, GpuHoursAreWorldTimesWallTimePlusEarlierAndDollarsAreHoursTimesPrice) {
  // 4 GPUs, 1.5 GPU-hours from an earlier attempt, $2/GPU-hour, 1000 tokens
  // a step, target 10,000 tokens (10 steps).
  CostMeter meter(4, 1.5, 2.0, 1000, 10'000);
  CostSnapshot c = meter.StepDone(1, /*elapsed_s=*/10, /*step_s=*/8);
  EXPECT_DOUBLE_EQ(c.gpu_hours, 1.5 + 4 * 10 / 3600.0);
  EXPECT_DOUBLE_EQ(c.usd(), c.gpu_hours * 2);
  EXPECT_EQ(c.tokens_done, 1000);
  // One step measured: its own time is the pace, 9 steps to go.
  EXPECT_DOUBLE_EQ(c.eta_s, 9 * 8.0);
  EXPECT_DOUBLE_EQ(c.projected_gpu_hours, c.gpu_hours + 4 * 72 / 3600.0);
  EXPECT_DOUBLE_EQ(c.projected_usd(), c.projected_gpu_hours * 2);
  // From the second step on the pace is wall time since the first step
  // ended (what happens between steps included), not the step's own time.
  meter.StepDone(2, 13, 2);
  c = meter.StepDone(3, 16, 2);
  EXPECT_DOUBLE_EQ(c.eta_s, 7 * 3.0);
  // At the target nothing is left: the projection is what was spent.
  for (int64_t step = 4; step <= 10; ++step) c = meter.StepDone(step, 16 + 3.0 * static_cast<double>(step - 3), 2);
  EXPECT_EQ(c.eta_s, 0);
  EXPECT_DOUBLE_EQ(c.projected_gpu_hours, c.gpu_hours);
}

TEST(CostMeterTest, ATargetBetweenStepsTakesTheStepThatReachesIt) {
  CostMeter meter(1, 0, 0, 1000, 2'500);  // 3 steps
  EXPECT_DOUBLE_EQ(meter.StepDone(1, 5, 5).eta_s, 2 * 5.0);
  EXPECT_DOUBLE_EQ(meter.StepDone(2, 10, 5).eta_s, 1 * 5.0);
  EXPECT_EQ(meter.StepDone(3, 15, 5).eta_s, 0);
}

TEST(CostMeterTest, WithoutAPriceThereAreNoDollarFigures) {
  CostMeter meter(2, 0, 0, 1000, 4000);
  const CostSnapshot c = meter.StepDone(1, 36, 30);
  nlohmann::json j;
  AddCostJson(c, j);
  EXPECT_TRUE(j.contains("gpu_hours"));
  EXPECT_DOUBLE_EQ(j["gpu_hours"].get<double>(), 0.02);
  for (const char* dollars : {"cost_usd", "projected_cost_usd", "price_per_gpu_hour"})
    EXPECT_FALSE(j.contains(dollars)) << dollars;
  EXPECT_EQ(CostProgressText(c, "rank").find('$'), std::string::npos) << CostProgressText(c, "rank");
  EXPECT_NE(CostProgressText(c, "rank").find("0.020 rank-h"), std::string::npos) << CostProgressText(c, "rank");
  CostMeter priced(2, 0, 3.5, 1000, 4000);
  const CostSnapshot p = priced.StepDone(1, 36, 30);
  EXPECT_NE(CostProgressText(p, "GPU").find("0.020 GPU-h $0.07"), std::string::npos) << CostProgressText(p, "GPU");
  EXPECT_NE(CostSummaryText(p, 0, "GPU").find("$0.07 at $3.50/GPU-h"), std::string::npos) << CostSummaryText(p, 0, "GPU");
}

class RunFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_run_cost_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(RunFilesTest, RankPeaksFindTheImbalanceAndTheMissingRanks) {
  const auto peak = [](int rank, int64_t reserved) {
    RankPeak p;
    p.rank = rank;
    p.step = 2;
    p.peak_allocated_bytes = reserved / 2;
    p.peak_reserved_bytes = reserved;
    p.host = "node" + std::to_string(rank / 2);
    return p;
  };
  WriteRankPeak(dir_.string(), peak(0, 1000), 4);
  WriteRankPeak(dir_.string(), peak(1, 1500), 4);
  WriteRankPeak(dir_.string(), peak(3, 1200), 8);           // another world size: not this run's
  std::ofstream(Path(RankPeakFileName(2))) << "{\"rank\": 2, ";  // torn
  const RankPeaks peaks = ReadRankPeaks(dir_.string(), 4);
  ASSERT_EQ(peaks.ranks.size(), 2u);
  EXPECT_EQ(peaks.ranks[1].rank, 1);
  EXPECT_EQ(peaks.ranks[1].peak_reserved_bytes, 1500);
  EXPECT_EQ(peaks.ranks[1].host, "node0");
  EXPECT_EQ(peaks.missing, (std::vector<int>{2, 3}));
  EXPECT_EQ(peaks.max_rank, 1);
  EXPECT_EQ(peaks.min_rank, 0);
  EXPECT_DOUBLE_EQ(peaks.max_over_min, 1.5);
  EXPECT_NE(RankPeaksText(peaks).find("highest rank 1"), std::string::npos) << RankPeaksText(peaks);
  EXPECT_NE(RankPeaksText(peaks).find("no peak from ranks 2, 3"), std::string::npos) << RankPeaksText(peaks);
  EXPECT_TRUE(IsRankPeakFile(RankPeakFileName(17)));
  EXPECT_FALSE(IsRankPeakFile("rank-x.peak_memory.json"));
  EXPECT_TRUE(IsRunFile(RankPeakFileName(3)));
  // A new run's directory starts without the old ranks' files.
  PrepareRunDirectory(dir_.string(), RunDirectoryMode::kOverwrite, 0);
  EXPECT_TRUE(ReadRankPeaks(dir_.string(), 4).ranks.empty());
}

TEST_F(RunFilesTest, RecordedGpuHoursAreTheLargestTheEarlierRunWrote) {
  EXPECT_EQ(RecordedGpuHours(dir_.string()), 0);
  std::ofstream(Path("metrics.jsonl")) << "{\"step\": 1, \"gpu_hours\": 0.5}\n{\"step\": 2, \"gpu_hours\": 0.75}\n{\"step\": 3, \"gpu_h";
  EXPECT_DOUBLE_EQ(RecordedGpuHours(dir_.string()), 0.75);  // the torn line is no loss: the one before it counts
  std::ofstream(Path("summary.json")) << "{\"steps\": 3, \"gpu_hours\": 0.9}";
  EXPECT_DOUBLE_EQ(RecordedGpuHours(dir_.string()), 0.9);  // the summary counts the time after the last step
}

}  // namespace
}  // namespace llmplan::executor
