// `llmplan doctor` on the GPU machine (label gpu): it passes on the lent
// machines and sees NVLink between every pair of their GPUs, and the health
// all-reduce sums right.
#include <iostream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"

namespace llmplan {
namespace {

using executor_test::CommandResult;
using executor_test::RunLlmplan;

TEST(DoctorGpuTest, PassesAndSeesNvlinkBetweenTheGpus) {
  const CommandResult r = RunLlmplan("doctor --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  int gpus = 0, nvlink_pairs = 0, pairs = 0;
  bool sums_correct = false;
  for (const auto& check : j["checks"]) {
    const std::string name = check["check"];
    if (name.rfind("gpu ", 0) == 0) ++gpus;
    if (name.rfind("link ", 0) == 0) {
      ++pairs;
      if (check["data"]["link"] == "nvlink" && check["data"]["bytes_per_s"].get<double>() > 100e9) ++nvlink_pairs;
    }
    if (name == "all-reduce") sums_correct = check["data"]["sums_correct"].get<bool>();
  }
  EXPECT_GE(gpus, 1) << r.output;
  EXPECT_TRUE(sums_correct) << r.output;
  EXPECT_EQ(pairs, gpus * (gpus - 1) / 2) << r.output;
  if (gpus >= 2) {
    EXPECT_EQ(nvlink_pairs, pairs) << r.output;  // the lent machines' GPUs share NVLink
  }
  const CommandResult text = RunLlmplan("doctor");
  std::cout << text.output;  // for the log
  EXPECT_EQ(text.status, 0) << text.output;
}

}  // namespace
}  // namespace llmplan
