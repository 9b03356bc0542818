// `llmplan profile` on the GPU machine (label gpu): a quick profile is a
// valid cuda profile with H200-class rates and measured fixed memory, and on
// 2+ GPUs it measured collectives and compute beside each other.
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/hardware_profile.h"
#include "tests/cli_runner.h"
#include "tests/executor/gpu_test_support.h"

namespace llmplan {
namespace {

using executor_test::CommandResult;
using executor_test::RunLlmplan;

TEST(ProfileGpuTest, QuickProfileIsAValidCudaProfileWithH200Rates) {
  const std::string dir = "/tmp/llmplan_profile_gpu_" + std::to_string(::getpid());
  ASSERT_EQ(executor_test::RunCommand("mkdir -p " + dir).status, 0);
  const std::string path = dir + "/gpu-here.json";
  const CommandResult r = RunLlmplan("profile --quick -o " + path);
  std::cout << r.output;  // the progress lines, for the log
  ASSERT_EQ(r.status, 0) << r.output;
  const HardwareProfile p = LoadHardwareProfile(path);
  EXPECT_EQ(p.device_kind, "cuda");
  EXPECT_GT(p.cuda_context_bytes, 0);
  EXPECT_GT(p.workspace_bytes, 0);
  EXPECT_GT(p.kernel_overhead_s, 0);

  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& m = j["measurements"];
  double square_8192 = 0;
  for (const auto& row : m["gemm"]["table"])
    if (row["what"] == "square 8192") square_8192 = row["flops_per_s"].get<double>();
  const std::string gpu = m["machine"]["device_name"].get<std::string>();
  if (gpu.find("H200") != std::string::npos) {
    EXPECT_GE(square_8192, 300e12) << gpu;
    EXPECT_LE(square_8192, 1000e12) << gpu;
    EXPECT_GE(p.memory_bandwidth_bytes_per_s, 2e12);
    EXPECT_LE(p.memory_bandwidth_bytes_per_s, 5e12);
  } else {
    EXPECT_GT(square_8192, 0) << gpu;
  }
  EXPECT_DOUBLE_EQ(p.cpu_adam_alone_params_per_s, m["cpu_adamw"]["alone"]["params_per_s"].get<double>());
  const int gpus = m["machine"]["gpus"].get<int>();
  if (gpus >= 2) {
    EXPECT_EQ(p.intra_node.all_reduce.measured_group_size, gpus);
    EXPECT_GT(p.collective_buffer_bytes, 0);
    // Collectives and compute beside each other: each ratio plausible. A
    // loop of large GEMMs fills every SM, so a small collective's blocks can
    // wait for GEMM blocks to drain: 64 MiB all-gathers took 7.2x their time
    // alone on 2 x H200, 256 MiB ones less. Rows the GEMMs could
    // not cover are left out, not failed.
    ASSERT_TRUE(m.contains("contention")) << m["skipped"].dump();
    const nlohmann::json& c = m["contention"];
    EXPECT_GE(c["collectives"]["table"].size(), 1u);
    EXPECT_LE(c["collectives"]["table"].size(), 6u);  // --quick: 2 sizes x 3 ops
    for (const auto& row : c["collectives"]["table"]) {
      EXPECT_GT(row["beside_over_alone"].get<double>(), 0.8) << row.dump();
      EXPECT_LT(row["beside_over_alone"].get<double>(), 20.0) << row.dump();
    }
    EXPECT_GT(c["compute"]["beside_over_alone"].get<double>(), 0.9);
    EXPECT_LT(c["compute"]["beside_over_alone"].get<double>(), 3.0);
    EXPECT_DOUBLE_EQ(p.collective_slowdown_during_compute,
                     c["collectives"]["slowdown_during_compute"].get<double>());
    EXPECT_DOUBLE_EQ(p.compute_slowdown_during_collectives,
                     c["compute"]["slowdown_during_collectives"].get<double>());
  }
  gpu_test::RemoveTree(dir);
}

}  // namespace
}  // namespace llmplan
