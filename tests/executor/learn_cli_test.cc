// The loop closes by itself, end to end through the built binaries on the
// CPU: `llmplan run` records what it measured into the calibration store
// (feedback/calibration_store.h), the next `llmplan estimate` for that
// hardware predicts with it and says so, and the flags that opt out
// (--no-learn, --no-calibration) and look after the store (calibrate --show,
// --forget) do what they say.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::RunLlmplan;

class LearnCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_learn_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // CTest turns the store off for every other test; this one has its own.
    ::setenv("LLMPLAN_CALIBRATION_DIR", Path("store").c_str(), 1);
    std::vector<uint16_t> tokens(40000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7 + i / 13) % 500);
    std::ofstream(Path("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  void TearDown() override {
    ::setenv("LLMPLAN_CALIBRATION_DIR", "off", 1);
    fs::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static CommandResult Estimate(const std::string& extra = "") {
    return RunLlmplan("estimate --model tiny-llama --gpu cpu --gpus 1 --seq 64 --global-batch 4 " + extra);
  }
  CommandResult Run(const std::string& name, const std::string& extra = "") {
    return RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("tokens.bin") + " --steps 6 --out " +
                      Path(name) + " --cpu --no-final-weights " + extra);
  }
  int Entries() const {
    int n = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir_ / "store" / "cpu", ec), end; !ec && it != end; it.increment(ec))
      n += it->is_directory() ? 1 : 0;
    return n;
  }
  fs::path dir_;
};

TEST_F(LearnCliTest, ARunFillsTheStoreAndTheNextEstimateIsCalibratedOnIt) {
  CommandResult plan = Estimate("-o " + Path("plan.json"));
  ASSERT_EQ(plan.status, 0) << plan.output;
  EXPECT_NE(plan.output.find("calibration: none (the profile as shipped"), std::string::npos) << plan.output;

  CommandResult run = Run("run1");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("llmplan: note: recorded for calibration in " + Path("store") + "/cpu/"), std::string::npos)
      << run.output;
  EXPECT_EQ(Entries(), 1);
  CommandResult opted_out = Run("run2", "--no-learn");
  ASSERT_EQ(opted_out.status, 0) << opted_out.output;
  EXPECT_EQ(opted_out.output.find("recorded for calibration"), std::string::npos) << opted_out.output;
  EXPECT_EQ(Entries(), 1);

  CommandResult calibrated = Estimate();
  ASSERT_EQ(calibrated.status, 0) << calibrated.output;
  EXPECT_NE(calibrated.output.find("on 1 x cpu-calibrated"), std::string::npos) << calibrated.output;
  EXPECT_NE(calibrated.output.find("calibrated on 1 run on this machine"), std::string::npos) << calibrated.output;
  CommandResult shipped = Estimate("--no-calibration");
  EXPECT_NE(shipped.output.find("on 1 x cpu,"), std::string::npos) << shipped.output;
  EXPECT_NE(shipped.output.find("calibration: off (--no-calibration)"), std::string::npos) << shipped.output;
  CommandResult as_json = Estimate("--json");
  ASSERT_EQ(as_json.status, 0) << as_json.output;
  const nlohmann::json j = nlohmann::json::parse(as_json.output);
  EXPECT_EQ(j["calibration"]["calibrated"], true);
  EXPECT_EQ(j["calibration"]["runs"], 1);

  CommandResult show = RunLlmplan("calibrate --show");
  ASSERT_EQ(show.status, 0) << show.output;
  EXPECT_NE(show.output.find("cpu: calibrated on 1 run"), std::string::npos) << show.output;
  EXPECT_NE(show.output.find("used     " + Path("run1")), std::string::npos) << show.output;
  CommandResult show_json = RunLlmplan("calibrate --show --json");
  ASSERT_EQ(show_json.status, 0) << show_json.output;
  EXPECT_EQ(nlohmann::json::parse(show_json.output)["hardware"]["cpu"]["runs"].size(), 1u);

  CommandResult both = RunLlmplan("calibrate --show --runs " + Path("run1"));
  EXPECT_EQ(both.status, 2) << both.output;
  CommandResult forget = RunLlmplan("calibrate --forget");
  ASSERT_EQ(forget.status, 0) << forget.output;
  EXPECT_NE(forget.output.find("forgot 1 recorded run(s)"), std::string::npos) << forget.output;
  EXPECT_EQ(Entries(), 0);
  EXPECT_NE(Estimate().output.find("calibration: none"), std::string::npos);
}

// After its warm-up a run holds its step time against the store's fit; one
// made slow on purpose (its optimizer ops 50 ms longer) says so once, naming
// the optimizer, and its summary keeps the notice.
TEST_F(LearnCliTest, ARunSlowerThanTheStorePredictsSaysWhereOnce) {
  ASSERT_EQ(Estimate("-o " + Path("plan.json")).status, 0);
  ASSERT_EQ(Run("run1").status, 0);
  ::setenv("LLMPLAN_TEST_SLOW_OPTIMIZER_S", "0.05", 1);
  CommandResult slow = Run("slow", "--no-learn");
  ::unsetenv("LLMPLAN_TEST_SLOW_OPTIMIZER_S");
  ASSERT_EQ(slow.status, 0) << slow.output;
  const std::string head = "llmplan: note: the steps take ";
  const size_t at = slow.output.find(head);
  ASSERT_NE(at, std::string::npos) << slow.output;
  EXPECT_EQ(slow.output.find(head, at + 1), std::string::npos) << "said once: " << slow.output;
  const std::string line = slow.output.substr(at, slow.output.find('\n', at) - at);
  EXPECT_NE(line.find("% longer than predicted"), std::string::npos) << line;
  EXPECT_NE(line.find("predicted on cpu-calibrated"), std::string::npos) << line;
  EXPECT_NE(line.find(": gpu_optimizer +"), std::string::npos) << line;
  std::ifstream in(Path("slow") + "/summary.json");
  const nlohmann::json summary = nlohmann::json::parse(in);
  ASSERT_TRUE(summary["prediction_disagreement"].is_object()) << summary.dump(1);
  EXPECT_EQ(summary["prediction_disagreement"]["classes"][0]["name"], "gpu_optimizer");
  EXPECT_GT(summary["prediction_disagreement"]["error"].get<double>(), -1.0);
  EXPECT_LT(summary["prediction_disagreement"]["error"].get<double>(), -0.3);
}

// Optimizer offload: the first step's host AdamW says what the run will
// take (the host's rate varies more than any profile measured). A run whose
// host AdamW is made slow on purpose prints, once, the rate it measured and
// the tokens/s the plan predicts at it; the progress lines hold each step
// against that too, and the prediction is near what the steps then take
// (the plan's own, at the profile's rate, is several times too fast).
TEST_F(LearnCliTest, TheFirstStepsHostAdamWGivesAPredictionTheStepsThenMeet) {
  ASSERT_EQ(Estimate("--offload optimizer -o " + Path("plan.json")).status, 0);
  // 0.25 s an update, 1.5 s a step for the six units: the host AdamW must
  // dwarf the rest of the step, which the prediction takes from the `cpu`
  // profile, and a 2-core CI machine runs the tiny model's forward and
  // backward up to 20x slower than that profile (0.15 s a step alone, 0.36 s
  // beside another test under ctest -j2, against 17 ms predicted); at 0.03 s
  // an update the step was half AdamW, and at 0.1 s it was still 1.58x the
  // prediction.
  ::setenv("LLMPLAN_TEST_SLOW_OPTIMIZER_S", "0.25", 1);
  CommandResult run = Run("offloaded", "--no-learn");
  ::unsetenv("LLMPLAN_TEST_SLOW_OPTIMIZER_S");
  ASSERT_EQ(run.status, 0) << run.output;
  // An offloaded step applies the step before's update (step_interpreter.h):
  // the first has none to apply, and the rate is read from the second.
  const std::string head = "host AdamW in step 2: ";
  const size_t at = run.output.find(head);
  ASSERT_NE(at, std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(head, at + 1), std::string::npos) << "said once: " << run.output;
  EXPECT_NE(run.output.find("% at its host AdamW)"), std::string::npos) << run.output;
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(Path("offloaded") + "/summary.json"));
  const nlohmann::json& host = summary["host_adam_prediction"];
  ASSERT_TRUE(host.is_object()) << summary.dump(1);
  EXPECT_GE(host["cpu_adam_seconds"].get<double>(), 0.25);
  const double at_host = host["predicted_tokens_per_s_per_gpu"].get<double>();
  const double plan = summary["predicted_tokens_per_s_per_gpu"].get<double>();
  const double measured = summary["mean_tokens_per_s_per_gpu"].get<double>();
  EXPECT_LT(at_host, plan / 2) << "the slow host AdamW is in the prediction";
  EXPECT_NEAR(at_host / measured, 1.0, 0.35) << "at " << at_host << " measured " << measured;
  // Without offload there is no host AdamW to measure: no line, no field.
  ASSERT_EQ(Estimate("-o " + Path("plan.json")).status, 0);
  CommandResult plain = Run("plain", "--no-learn");
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(plain.output.find("host AdamW in step"), std::string::npos) << plain.output;
  EXPECT_TRUE(nlohmann::json::parse(std::ifstream(Path("plain") + "/summary.json"))["host_adam_prediction"].is_null());
}

TEST_F(LearnCliTest, WithTheStoreOffNothingIsRecordedOrRead) {
  ASSERT_EQ(Estimate("-o " + Path("plan.json")).status, 0);
  ::setenv("LLMPLAN_CALIBRATION_DIR", "off", 1);
  CommandResult run = Run("run1");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.output.find("calibration"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(dir_ / "store"));
  CommandResult show = RunLlmplan("calibrate --show");
  EXPECT_EQ(show.status, 2) << show.output;
  EXPECT_NE(show.output.find("the calibration store is off"), std::string::npos) << show.output;
}

}  // namespace
}  // namespace llmplan
