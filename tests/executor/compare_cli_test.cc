// `llmplan compare` end to end on real CPU runs: a 1-rank and a 2-rank
// (Gloo) run of tiny-llama, 3 steps each, then compare as JSON, text, HTML
// report and side-by-side trace; bad inputs are one line with exit status 2.
// The runs are made once for the suite (LibTorch start-up and training are
// the slow part). No assertion on how fast anything ran.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/estimate.h"
#include "tests/cli_runner.h"
#include "tests/executor/gloo_skip.h"

namespace llmplan {
namespace {

using executor_test::CommandResult;
using executor_test::RunLlmplan;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CompareCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!executor::GlooCommunicatorsAvailable()) return;  // SetUp skips each test
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("llmplan_compare_cli_" + std::to_string(::getpid())));
    std::filesystem::remove_all(*dir_);
    std::filesystem::create_directories(*dir_);
    // Raw uint16 token ids below tiny-llama's vocabulary of 512.
    std::vector<uint16_t> tokens(20000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7 + i / 13) % 500);
    std::ofstream(Path("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    for (const auto& [ranks, plan_args] :
         std::vector<std::pair<int, std::string>>{{1, "--gpus 1 --global-batch 4 --checkpoint-layers 0"},
                                                  {2, "--gpus 2 --global-batch 8 --strategy full_shard"}}) {
      const std::string n = std::to_string(ranks);
      CommandResult plan = RunLlmplan("estimate --model tiny-llama --gpu cpu --seq 64 " + plan_args + " -o " +
                                      Path("plan" + n + ".json"));
      ASSERT_EQ(plan.status, 0) << plan.output;
      CommandResult run = RunLlmplan("run --plan " + Path("plan" + n + ".json") + " --data " + Path("tokens.bin") +
                                     " --steps 3 --out " + Path("run" + n) + " --cpu --no-final-weights" +
                                     (ranks > 1 ? " --cpu-ranks " + n : ""));
      ASSERT_EQ(run.status, 0) << run.output;
    }
  }
  void SetUp() override { LLMPLAN_SKIP_WITHOUT_GLOO(); }

  static void TearDownTestSuite() {
    if (dir_ == nullptr) return;  // skipped without Gloo: nothing was made
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Path(const std::string& name) { return (*dir_ / name).string(); }

  static std::filesystem::path* dir_;
};
std::filesystem::path* CompareCliTest::dir_ = nullptr;

bool IsOneLine(const std::string& output) { return !output.empty() && output.find('\n') == output.size() - 1; }

TEST_F(CompareCliTest, JsonHasTheContract) {
  for (const char* run : {"run1", "run2"}) {
    SCOPED_TRACE(run);
    CommandResult r = RunLlmplan("compare --run " + Path(run) + " --json");
    ASSERT_EQ(r.status, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    for (const char* key : {"step_time_s", "device_step_s", "exposed_communication_s", "tokens_per_s_per_gpu", "mfu",
                            "peak_allocated_bytes", "peak_reserved_bytes"}) {
      SCOPED_TRACE(key);
      ASSERT_TRUE(j.contains(key));
      ASSERT_TRUE(j[key]["predicted"].is_number());
      ASSERT_TRUE(j[key]["measured"].is_number());
      const nlohmann::json& error = j[key]["error"];
      if (error.is_null()) {
        // Only where nothing was measured (e.g. no communication to expose).
        EXPECT_EQ(j[key]["measured"].get<double>(), 0);
      } else {
        EXPECT_TRUE(std::isfinite(error.get<double>()));
      }
    }
    for (const char* key : {"step_time_s", "device_step_s", "tokens_per_s_per_gpu", "peak_allocated_bytes"}) {
      EXPECT_GT(j[key]["measured"].get<double>(), 0) << key;
      EXPECT_TRUE(j[key]["error"].is_number()) << key;
    }
    EXPECT_FALSE(j["peak_op"]["predicted"].get<std::string>().empty());
    EXPECT_FALSE(j["peak_op"]["measured"].get<std::string>().empty());
    EXPECT_EQ(j["run"]["dir"], Path(run));
    EXPECT_EQ(j["run"]["device"], "cpu");
    EXPECT_EQ(j["run"]["steps"], 3);
    EXPECT_EQ(j["run"]["timed_steps"], 2);
    EXPECT_FALSE(j["run"]["memory_source"].get<std::string>().empty());
    EXPECT_EQ(j["profile"], "cpu");
    ASSERT_TRUE(j["classes"].is_array());
    std::set<std::string> names;
    for (const auto& k : j["classes"]) {
      names.insert(k["name"].get<std::string>());
      EXPECT_TRUE(k["predicted_s"].is_number()) << k;
      EXPECT_GE(k["measured_s"].get<double>(), 0) << k;
    }
    for (const char* name : {"forward_blocks", "backward_blocks", "head_forward_loss", "gpu_optimizer", "compute_idle"})
      EXPECT_TRUE(names.count(name)) << name;
    if (std::string(run) == "run2") EXPECT_TRUE(names.count("reduce_scatter"));
    if (std::string(run) == "run1") EXPECT_TRUE(names.count("recompute"));
  }
}

TEST_F(CompareCliTest, TextReportAndTrace) {
  const std::string report = Path("report.html"), trace = Path("both.json");
  CommandResult r = RunLlmplan("compare --run " + Path("run2") + " --report " + report + " --trace " + trace);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* text : {"Step", "step time", "device step", "exposed communication", "peak allocated",
                           "peak reached during", "forward_blocks", "compute_idle", "not\n  observed"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;

  // The page: self-contained, with charts and the step-time numbers.
  CommandResult j = RunLlmplan("compare --run " + Path("run2") + " --json");
  ASSERT_EQ(j.status, 0) << j.output;
  const nlohmann::json numbers = nlohmann::json::parse(j.output);
  const std::string html = ReadFile(report);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_NE(html.find(FormatSeconds(numbers["step_time_s"]["predicted"].get<double>())), std::string::npos);
  EXPECT_NE(html.find(FormatSeconds(numbers["step_time_s"]["measured"].get<double>())), std::string::npos);

  // The trace: predicted and measured processes with the same tracks.
  const nlohmann::json t = nlohmann::json::parse(ReadFile(trace));
  std::map<int, std::string> process;
  std::map<int, std::set<std::string>> tracks;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") process[e["pid"].get<int>()] = e["args"]["name"];
    if (e["name"] == "thread_name") tracks[e["pid"].get<int>()].insert(e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(process[1], "predicted");
  EXPECT_EQ(process[2], "measured");
  EXPECT_FALSE(tracks[1].empty());
  EXPECT_EQ(tracks[1], tracks[2]);
}

TEST_F(CompareCliTest, BadInputIsOneLineWithStatus2) {
  // A plan whose program differs: another micro-batch count.
  CommandResult other = RunLlmplan(
      "estimate --model tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 8 "
      "--micro-batch 2 --grad-accum 4 -o " +
      Path("other.json"));
  ASSERT_EQ(other.status, 0) << other.output;
  std::filesystem::create_directories(Path("not_a_run"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"missing run dir", "compare --run " + Path("no_such_run")},
      {"not a run", "compare --run " + Path("not_a_run")},
      {"other program", "compare --run " + Path("run1") + " --plan " + Path("other.json")},
      {"unknown profile", "compare --run " + Path("run1") + " --gpu no-such-gpu"},
      {"unwritable report", "compare --run " + Path("run1") + " --report " + Path("no/such/dir/r.html")},
      {"unwritable trace", "compare --run " + Path("run1") + " --trace " + Path("no/such/dir/t.json")},
      {"no --run", "compare --json"},
  };
  for (const auto& [what, args] : cases) {
    CommandResult r = RunLlmplan(args);
    EXPECT_EQ(r.status, 2) << what << ": " << r.output;
    EXPECT_TRUE(IsOneLine(r.output)) << what << ": " << r.output;
  }
}

}  // namespace
}  // namespace llmplan
