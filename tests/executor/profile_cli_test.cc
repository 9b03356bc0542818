// `llmplan profile` end to end through the built binary, on the CPU: a quick
// CPU profile that the planner loads and plans with, with rates a CPU can
// reach; a bad -o is one line and exit 2 before anything is measured.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/hardware_profile.h"
#include "tests/cli_runner.h"

namespace llmplan {
namespace {

using executor_test::CommandResult;
using executor_test::RunLlmplan;

class ProfileCliTest : public ::testing::Test {
 protected:
  // One quick CPU profile for the whole suite: measuring takes seconds.
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("llmplan_profile_cli_" + std::to_string(::getpid())));
    std::filesystem::remove_all(*dir_);
    std::filesystem::create_directories(*dir_);
    // With the disk this directory is on (NVMe offload's rates): 1 GiB written and read back.
    profile_run_ = new CommandResult(
        RunLlmplan("profile --cpu --quick --nvme-dir " + dir_->string() + " -o " + Path("cpu-here.json")));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete profile_run_;
  }
  static std::string Path(const std::string& name) { return (*dir_ / name).string(); }
  static nlohmann::json ProfileJson() {
    std::ifstream in(Path("cpu-here.json"));
    return nlohmann::json::parse(in);
  }

  static std::filesystem::path* dir_;
  static CommandResult* profile_run_;
};

std::filesystem::path* ProfileCliTest::dir_ = nullptr;
CommandResult* ProfileCliTest::profile_run_ = nullptr;

TEST_F(ProfileCliTest, QuickCpuProfileLoadsWithRatesACpuCanReach) {
  ASSERT_EQ(profile_run_->status, 0) << profile_run_->output;
  // Progress: one line per measurement with the time left, and where it went.
  EXPECT_NE(profile_run_->output.find("llmplan profile: [1/6] bf16 GEMMs"), std::string::npos) << profile_run_->output;
  EXPECT_NE(profile_run_->output.find("left)"), std::string::npos) << profile_run_->output;
  EXPECT_NE(profile_run_->output.find("wrote " + Path("cpu-here.json")), std::string::npos) << profile_run_->output;

  const HardwareProfile p = LoadHardwareProfile(Path("cpu-here.json"));
  EXPECT_EQ(p.name, "cpu-here");
  EXPECT_EQ(p.device_kind, "cpu");
  // A few cores of a CPU: well under 10 TFLOP/s and 1 TB/s, and above nothing.
  const double gemm = p.GemmFlopsPerSecond(1024, 1024, 1024);
  EXPECT_GT(gemm, 1e8);
  EXPECT_LT(gemm, 10e12);
  EXPECT_LT(p.bf16_peak_flops, 100e12);
  for (double rate : {p.attention_forward_flops_per_s, p.attention_backward_flops_per_s}) {
    EXPECT_GT(rate, 1e7);
    EXPECT_LT(rate, 10e12);
  }
  EXPECT_GT(p.memory_bandwidth_bytes_per_s, 1e8);
  EXPECT_LT(p.memory_bandwidth_bytes_per_s, 1e12);
  EXPECT_GT(p.cpu_adam_params_per_s, 1e6);
  EXPECT_LT(p.cpu_adam_params_per_s, 1e11);
  EXPECT_GT(p.kernel_launch_s, 0);
  EXPECT_LT(p.kernel_launch_s, 1e-3);
  EXPECT_EQ(p.cuda_context_bytes, 0);
  EXPECT_GT(p.memory_bytes, 1e8);
  EXPECT_NE(p.source.find("measured by llmplan profile --quick"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("Kept from base profile cpu"), std::string::npos) << p.source;

  const nlohmann::json j = ProfileJson();
  ASSERT_TRUE(j.contains("measurements"));
  const nlohmann::json& m = j["measurements"];
  EXPECT_EQ(m["machine"]["device_kind"], "cpu");
  EXPECT_GE(m["gemm"]["table"].size(), 4u);
  EXPECT_EQ(m["gemm"]["dtype"], "bf16");
  EXPECT_GE(m["gemm"]["cpu_fp32_table"].size(), 1u);
  EXPECT_GE(m["attention"]["table"].size(), 2u);
  for (const auto& row : m["gemm"]["table"]) EXPECT_GT(row["flops_per_s"].get<double>(), 0) << row.dump();
  EXPECT_TRUE(m.contains("memory_bandwidth"));
  EXPECT_TRUE(m.contains("cpu_adamw"));
  EXPECT_EQ(m["from_base"]["profile"], "cpu");
  // No device, no pinned copies beside the CPU AdamW: the base's 0.
  EXPECT_EQ(p.cpu_adam_slowdown_during_copies, 0);
  EXPECT_FALSE(m["cpu_adamw"].contains("beside_copies"));
  const auto& kept = m["from_base"]["fields"];
  EXPECT_NE(std::find(kept.begin(), kept.end(), "host.cpu_adam_slowdown_during_copies"), kept.end()) << kept.dump();
  EXPECT_EQ(j["host"]["cpu_adam_slowdown_during_copies"], 0);
}

TEST_F(ProfileCliTest, EstimatePlansWithTheMeasuredProfile) {
  ASSERT_EQ(profile_run_->status, 0) << profile_run_->output;
  const CommandResult r = RunLlmplan("estimate --model tiny-llama --gpus 1 --gpu " + Path("cpu-here.json") +
                                     " --seq 128 --global-batch 8 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["time"]["step_s"].get<double>(), 0);
  EXPECT_TRUE(j["fits"].get<bool>());
}

TEST_F(ProfileCliTest, NvmeDirGivesDiskRatesAndLeavesNoFile) {
  ASSERT_EQ(profile_run_->status, 0) << profile_run_->output;
  EXPECT_NE(profile_run_->output.find("] NVMe: 1.00 GiB written and read back"), std::string::npos)
      << profile_run_->output;
  const HardwareProfile p = LoadHardwareProfile(Path("cpu-here.json"));
  EXPECT_GT(p.nvme_read_bytes_per_s, 1e6);
  EXPECT_GT(p.nvme_write_bytes_per_s, 1e6);
  const nlohmann::json nvme = ProfileJson()["measurements"]["nvme"];
  EXPECT_EQ(nvme["bytes"].get<double>(), 1073741824.0);
  EXPECT_EQ(nvme["dir"], dir_->string());
  EXPECT_NE(p.source.find("NVMe ("), std::string::npos) << p.source;
  for (const auto& entry : std::filesystem::directory_iterator(*dir_))
    EXPECT_EQ(entry.path().filename().string().find("llmplan-disk-probe"), std::string::npos) << entry.path();
  // Not a directory: one line, before anything is measured.
  const CommandResult bad = RunLlmplan("profile --cpu --quick --nvme-dir " + Path("missing") + " -o " + Path("y.json"));
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
  EXPECT_NE(bad.output.find("--nvme-dir " + Path("missing") + " is not a directory"), std::string::npos) << bad.output;
}

TEST_F(ProfileCliTest, BadOutputPathIsOneLineAndExit2BeforeMeasuring) {
  for (const std::string& out : {std::string("/nonexistent-llmplan-dir/x.json"), Path("")}) {
    const CommandResult r = RunLlmplan("profile --cpu --quick -o " + out);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_EQ(r.output.rfind("llmplan: -o ", 0), 0u) << r.output;
  }
  const CommandResult missing = RunLlmplan("profile --cpu --quick");
  EXPECT_EQ(missing.status, 2) << missing.output;
  const CommandResult base = RunLlmplan("profile --cpu --quick --base h200-sxm -o " + Path("x.json"));
  EXPECT_EQ(base.status, 2) << base.output;
  EXPECT_NE(base.output.find("is a cuda profile"), std::string::npos) << base.output;
  EXPECT_FALSE(std::filesystem::exists(Path("x.json")));
}

}  // namespace
}  // namespace llmplan
