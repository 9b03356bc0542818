// A disk that really fills up under `llmplan run` (issue 11), through the
// built binary on the CPU. tests/executor/small_disk.sh puts --ckpt-dir
// and/or --out on a tmpfs of a few MiB in a private mount namespace (writes
// past it fail with ENOSPC, as on a full disk), or, where mount namespaces
// are not permitted, runs llmplan under RLIMIT_FSIZE (writes past the limit
// fail with EFBIG): the failure paths run either way, never skipped.
//
// What a user relies on:
//   - a checkpoint save that fails is a warning: training goes on, and the
//     checkpoint before it stays whole (it resumes, bit for bit);
//   - a metrics write that fails stops the run with one line that says the
//     disk is full, exit status non-zero, every line written before intact,
//     and the last checkpoint resumes to the same losses as a run that
//     never stopped.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "tests/cli_runner.h"
#include "tests/executor/run_test_support.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::LlmplanErrorLines;
using executor_test::CommandResult;
using executor_test::RunCommand;
using executor_test::RunLlmplan;

const std::string kSmallDisk = std::string(LLMPLAN_SOURCE_DIR) + "/tests/executor/small_disk.sh";

// Bytes `path` (a file, or a directory's files) takes on a tmpfs: each file
// rounded up to whole 4 KiB pages; 0 when it does not exist.
int64_t PageBytes(const fs::path& path) {
  auto pages = [](uintmax_t bytes) { return static_cast<int64_t>((bytes + 4095) / 4096 * 4096); };
  if (fs::is_regular_file(path)) return pages(fs::file_size(path));
  int64_t bytes = 0;
  if (fs::is_directory(path))
    for (const auto& e : fs::recursive_directory_iterator(path))
      if (e.is_regular_file()) bytes += pages(e.file_size());
  return bytes;
}

class DiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_disk_full_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    mode_ = RunCommand(kSmallDisk + " --mode").output;
    mode_ = mode_.substr(0, mode_.find('\n'));
    ASSERT_TRUE(mode_ == "tmpfs" || mode_ == "rlimit") << mode_;

    Plan plan = executor_test::TinyCpuPlan(1);
    plan.optimizer.lr = 3e-3;
    plan.optimizer.warmup_steps = 2;
    plan_ = Path("plan.json");
    SavePlan(plan, plan_);
    // Tokens with structure, so the losses move every step.
    std::vector<uint16_t> tokens(100'000);
    std::mt19937 gen(11);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 31 + (i / 97) + gen() % 3) % 250);
    std::ofstream(Path("tokens.u16"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));

    // The run that never stops: its losses, and the sizes the small disks are cut to.
    CommandResult straight = Run("--steps 8 --out " + Path("straight") + " --ckpt-dir " + Path("straight_ckpt") +
                                 " --ckpt-every 2");
    ASSERT_EQ(straight.status, 0) << straight.output;
    straight_losses_ = Losses(Path("straight"));
    ASSERT_EQ(straight_losses_.size(), 8u);
    checkpoint_bytes_ = PageBytes(Path("straight_ckpt/step-00000008")) + 4096;  // as big as step 2 (pruned)
    ASSERT_GT(checkpoint_bytes_, 1 << 20) << "tiny-llama's state: 12 bytes x ~250k parameters";
    // What a run directory holds besides its per-step lines (plan, program,
    // per-rank files), as the disk full of them will.
    run_fixed_bytes_ = PageBytes(Path("straight"));
    for (const char* grows : {"metrics.jsonl", "op_times.jsonl", "trace.json", "summary.json"})
      run_fixed_bytes_ -= PageBytes(Path("straight") + "/" + grows);
    step_bytes_ = (static_cast<int64_t>(fs::file_size(Path("straight/metrics.jsonl")) +
                                        fs::file_size(Path("straight/op_times.jsonl")))) / 8;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // `llmplan run` of the plan on the tokens, with `args`.
  CommandResult Run(const std::string& args) {
    return RunLlmplan("run --cpu --plan " + plan_ + " --data " + Path("tokens.u16") + " --no-final-weights " + args);
  }
  // The same with `specs` (DIR=KIB ...) on small disks (small_disk.sh).
  CommandResult RunOnSmallDisk(const std::string& specs, const std::string& args) {
    CommandResult r = RunCommand(kSmallDisk + " " + specs + " -- " + LLMPLAN_BINARY + " run --cpu --plan " + plan_ +
                                 " --data " + Path("tokens.u16") + " --no-final-weights " + args);
    EXPECT_EQ(r.output.rfind("small_disk: " + mode_ + "\n", 0), 0u) << r.output;
    return r;
  }
  // rlimit mode limits every file, a checkpoint's shard as much as the
  // metrics: the checkpoint from before the disk filled comes from a run
  // without the limit, which the limited one resumes. (With a tmpfs the
  // limited run saves it itself.)
  std::string ResumeFromAnEarlierCheckpointIfLimited(const std::string& out, const std::string& ckpt) {
    if (mode_ != "rlimit") return "";
    CommandResult earlier = Run("--steps 2 --out " + out + " --ckpt-dir " + ckpt);
    EXPECT_EQ(earlier.status, 0) << earlier.output;
    return " --resume";
  }

  // The losses of metrics.jsonl; every line must parse and the steps run
  // first_step, first_step + 1, ...
  static std::vector<double> Losses(const std::string& run_dir, int64_t first_step = 1) {
    std::vector<double> losses;
    std::ifstream in(run_dir + "/metrics.jsonl");
    int64_t expected_step = first_step;
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << run_dir << ": a torn line: " << line;
      if (j.is_discarded()) break;
      EXPECT_EQ(j["step"].get<int64_t>(), expected_step++) << run_dir;
      losses.push_back(j["loss"].get<double>());
    }
    return losses;
  }
  static size_t WholeLines(const std::string& path) {
    std::ifstream in(path);
    size_t n = 0;
    for (std::string line; std::getline(in, line); ++n)
      EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << path << ": a torn line: " << line;
    return n;
  }

  fs::path dir_;
  std::string mode_;  // "tmpfs" or "rlimit"
  std::string plan_;
  std::vector<double> straight_losses_;
  int64_t checkpoint_bytes_ = 0, run_fixed_bytes_ = 0, step_bytes_ = 0;
};

TEST_F(DiskFullTest, CheckpointSaveThatFailsIsAWarningAndTrainingGoesOn) {
  const std::string ckpt = Path("ckpt"), out = Path("run");
  const std::string resume = ResumeFromAnEarlierCheckpointIfLimited(out, ckpt);
  // tmpfs: room for the step-2 checkpoint, not for a second beside it (the
  // older one goes only after the newer is complete). rlimit: no shard fits.
  const int64_t kib = mode_ == "tmpfs" ? (checkpoint_bytes_ + (64 << 10)) / 1024 : 1024;
  CommandResult r = RunOnSmallDisk(ckpt + "=" + std::to_string(kib),
                                   "--steps 8 --out " + out + " --ckpt-dir " + ckpt + " --ckpt-every 2" + resume);
  ASSERT_EQ(r.status, 0) << "training goes on: " << r.output;
  const std::string reason = mode_ == "tmpfs" ? "No space left on device" : "File too large";
  for (int step : {4, 6, 8})
    EXPECT_NE(r.output.find("llmplan: warning: checkpoint at step " + std::to_string(step) + " not saved: "),
              std::string::npos)
        << step << ": " << r.output;
  EXPECT_NE(r.output.find(reason), std::string::npos) << r.output;
  EXPECT_TRUE(LlmplanErrorLines(r.output).empty()) << r.output;

  // Every step ran and was recorded; the summary names the checkpoint that survived.
  EXPECT_EQ(Losses(out, 1), straight_losses_);
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(out + "/summary.json"));
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_EQ(summary["last_step"], 8);
  EXPECT_EQ(summary["last_checkpoint"], ckpt + "/step-00000002") << summary.dump(1);

  // The disk holds that checkpoint and nothing half-written beside it.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(ckpt + ".after"))
    if (e.path().filename() != ".llmplan.lock") left.push_back(e.path().filename().string());  // the run's lock
  EXPECT_EQ(left, std::vector<std::string>{"step-00000002"});
  // Whole: it loads (every file checked against its size and CRC-32C) and
  // continues exactly as the run that never failed did.
  CommandResult resumed = Run("--steps 8 --out " + Path("resumed") + " --resume-from " + ckpt + ".after/step-00000002");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(Losses(Path("resumed"), 3), std::vector<double>(straight_losses_.begin() + 2, straight_losses_.end()));
}

TEST_F(DiskFullTest, MetricsWriteThatFailsStopsTheRunInOneLineAndTheLastCheckpointResumes) {
  // tmpfs: one small disk for everything, as a user's disk is: the step-2
  // checkpoint, the run's files and about six steps of metrics fit; the
  // step-4 checkpoint does not (a warning), and a few steps later neither
  // does a metrics line. rlimit: op_times.jsonl passes 64 KiB after a few steps.
  const std::string disk = Path("disk");
  const std::string out = disk + "/run", ckpt = disk + "/ckpt";
  const std::string resume = ResumeFromAnEarlierCheckpointIfLimited(out, ckpt);
  const int64_t kib =
      mode_ == "tmpfs" ? (checkpoint_bytes_ + run_fixed_bytes_ + 6 * step_bytes_ + (16 << 10)) / 1024 : 64;
  CommandResult r = RunOnSmallDisk(disk + "=" + std::to_string(kib), "--steps 1000 --out " + out + " --ckpt-dir " +
                                                                         ckpt + " --ckpt-every 2" + resume);
  EXPECT_EQ(r.status, 2) << r.output;
  const std::vector<std::string> errors = LlmplanErrorLines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  const std::string reason = mode_ == "tmpfs" ? "No space left on device" : "File too large";
  EXPECT_NE(errors[0].find(".jsonl failed at step "), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("(" + reason + "): free space in " + out + ", then continue with --resume from the last "
                           "checkpoint"),
            std::string::npos)
      << errors[0];

  // Nothing written before is lost: whole lines, one per step, up to the failure.
  const std::string after = disk + ".after/run";
  const std::vector<double> losses = Losses(after, 1);
  ASSERT_GE(losses.size(), 3u) << "the disk filled after the step-2 checkpoint: " << r.output;
  ASSERT_LT(losses.size(), 100u) << r.output;
  EXPECT_TRUE(std::equal(losses.begin(), losses.begin() + std::min<size_t>(losses.size(), 8), straight_losses_.begin()));
  const size_t op_lines = WholeLines(after + "/op_times.jsonl");
  EXPECT_TRUE(op_lines == losses.size() || op_lines + 1 == losses.size()) << op_lines << " vs " << losses.size();
  if (fs::exists(after + "/summary.json")) {  // only if it found room
    const nlohmann::json summary = nlohmann::json::parse(std::ifstream(after + "/summary.json"));
    EXPECT_EQ(summary["status"], "failed");
    EXPECT_EQ("llmplan: " + summary["error"].get<std::string>(), errors[0]);
    EXPECT_EQ(summary["last_checkpoint"], ckpt + "/step-00000002");
  }
  std::vector<std::string> checkpoints;
  for (const auto& e : fs::directory_iterator(disk + ".after/ckpt"))
    if (e.path().filename() != ".llmplan.lock") checkpoints.push_back(e.path().filename().string());  // the run's lock
  EXPECT_EQ(checkpoints, std::vector<std::string>{"step-00000002"}) << r.output;

  // Space freed (the files moved to a disk with room): --resume continues
  // from step 2 and the run reads as the one that never stopped.
  fs::copy(after, Path("moved_run"), fs::copy_options::recursive);
  CommandResult resumed =
      Run("--steps 8 --out " + Path("moved_run") + " --ckpt-dir " + disk + ".after/ckpt --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(Losses(Path("moved_run"), 1), straight_losses_);
}

}  // namespace
}  // namespace llmplan
