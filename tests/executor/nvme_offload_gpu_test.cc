// NVMe offload on a real GPU (label gpu), through `llmplan estimate` and
// `llmplan run` as users run them: Llama-3.2-1B on one GPU with a host
// memory budget (--host-memory 13 GiB = 13.96 GB) below its optimizer state
// (ZeRO's 12 bytes per parameter: fp32 master, m and v, 14.8 GB) and far
// below what the host offload pins (16 bytes per parameter with the
// gradient and bf16 staging: 19.8 GB), so only the NVMe plan fits: its m and
// v (9.9 GB) live in a file on the local SSD, the host keeps the master and
// the staging (10 bytes per parameter, 12.4 GB, and 96 MiB of blocks). It
// must run, and end where the host-offloaded run of the same steps ends.
//
// The disk: $LLMPLAN_NVME_DIR (a directory on the local SSD), else the
// system's temp directory. The profile is h200-sxm with disk rates written
// in, high enough that the planner does not refuse this short test step (the
// test checks the executor; `llmplan profile --nvme-dir` measures a real disk).
//
// Tolerance: the CPU AdamW is deterministic, the GPU's backward is not (atomics
// in the embedding's and attention's backward), so the NVMe run must be no
// further from the host-offloaded run than a second host-offloaded run is
// (2x, plus 1e-6 for rounding): the disk adds no error of its own.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "executor/checkpoint/safetensors.h"
#include "tests/cli_runner.h"
#include "tests/executor/gpu_test_support.h"
#include "tests/executor/run_test_support.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::RunLlmplan;

class NvmeOffloadGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU";
    dir_ = fs::temp_directory_path() / ("llmplan_nvme_gpu_" + std::to_string(::getpid()));
    gpu_test::RemoveTree(dir_.string());
    fs::create_directories(dir_);
    const char* nvme = std::getenv("LLMPLAN_NVME_DIR");
    nvme_dir_ = nvme != nullptr && *nvme != '\0' ? std::string(nvme) : Path("nvme");
    fs::create_directories(nvme_dir_);
    executor_test::WriteStructuredTokens(Path("tokens.bin"), 400000);
    nlohmann::json profile = nlohmann::json::parse(
        executor_test::ReadAll(std::string(LLMPLAN_SOURCE_DIR) + "/profiles/h200-sxm.json"));
    profile["host"]["nvme_read_bytes_per_s"] = 1e12;
    profile["host"]["nvme_write_bytes_per_s"] = 1e12;
    std::ofstream(Path("h200-nvme.json")) << profile.dump(2);
  }
  void TearDown() override {
    if (!dir_.empty()) gpu_test::RemoveTree(dir_.string());
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  CommandResult Estimate(const std::string& offload_to, const std::string& host_memory, const std::string& out) {
    return RunLlmplan("estimate --model llama3.2-1b --gpus 1 --gpu " + Path("h200-nvme.json") +
                      " --seq 1024 --global-batch 8 --micro-batch 4 --strategy full_shard --offload optimizer"
                      " --offload-to " + offload_to + (host_memory.empty() ? "" : " --host-memory " + host_memory) +
                      " --lr 3e-4 --warmup-steps 2 -o " + Path(out));
  }
  CommandResult Run(const std::string& plan, const std::string& out, const std::string& extra = "") {
    return RunLlmplan("run --plan " + Path(plan) + " --data " + Path("tokens.bin") + " --steps 4 --out " + Path(out) +
                      " " + extra);
  }
  static double MaxDifference(const std::string& a, const std::string& b) {
    const auto x = checkpoint::ReadSafetensors(a).tensors, y = checkpoint::ReadSafetensors(b).tensors;
    EXPECT_EQ(x.size(), y.size());
    double worst = 0;
    for (const auto& [name, t] : x) worst = std::max(worst, (t - y.at(name)).abs().max().item<double>());
    return worst;
  }
  fs::path dir_;
  std::string nvme_dir_;
};

TEST_F(NvmeOffloadGpuTest, StateBeyondTheHostBudgetTrainsOnNvmeAsOnTheHost) {
  // The budget: the host offload does not fit, the NVMe plan does.
  CommandResult host_refused = Estimate("host", "13", "refused.json");
  EXPECT_NE(host_refused.status, 0) << host_refused.output;
  EXPECT_NE(host_refused.output.find("host memory"), std::string::npos) << host_refused.output;
  CommandResult nvme_plan = Estimate("nvme", "13", "nvme.json");
  ASSERT_EQ(nvme_plan.status, 0) << nvme_plan.output;
  const nlohmann::json plan = nlohmann::json::parse(executor_test::ReadAll(Path("nvme.json")));
  ASSERT_EQ(plan["offload_to"], "nvme");
  // Below the optimizer state (master, m, v) by design.
  ASSERT_LT(plan["host_memory_per_node_bytes"].get<double>(), 12.0 * 1'235'814'400);
  // The reference: the same plan in host memory, without the budget.
  ASSERT_EQ(Estimate("host", "", "host.json").status, 0);

  CommandResult nvme = Run("nvme.json", "nvme", "--nvme-dir " + nvme_dir_);
  ASSERT_EQ(nvme.status, 0) << nvme.output;
  for (const char* out : {"host", "host-again"}) {
    CommandResult r = Run("host.json", out);
    ASSERT_EQ(r.status, 0) << r.output;
  }
  const std::string host = Path("host/final.safetensors");
  const double baseline = MaxDifference(host, Path("host-again/final.safetensors"));
  const double on_nvme = MaxDifference(host, Path("nvme/final.safetensors"));
  std::printf("max |param difference| vs host offload: another host-offload run %.3g, NVMe %.3g\n", baseline, on_nvme);
  EXPECT_LE(on_nvme, 2 * baseline + 1e-6);
  // What the run pinned (master, gradient and bf16 staging) stayed within
  // the budget: m and v were never in host memory.
  const nlohmann::json summary = nlohmann::json::parse(executor_test::ReadAll(Path("nvme/summary.json")));
  const double pinned = summary["peak_pinned_host_bytes"].get<double>();
  std::printf("NVMe run: %.2f GiB pinned, %.2f GiB resident at peak, %.0f tok/s\n", pinned / (1 << 30),
              summary["peak_host_rss_bytes"].get<double>() / (1 << 30),
              summary["mean_tokens_per_s_per_gpu"].get<double>());
  EXPECT_GT(pinned, 4.0 * 1'235'814'400);  // at least the fp32 master
  EXPECT_LT(pinned, 13.0 * (1 << 30));
}

}  // namespace
}  // namespace llmplan
