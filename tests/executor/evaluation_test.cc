// `llmplan run --eval-data`, end to end on CPU ranks: the evaluation changes
// nothing the training computes (losses and final weights bit for bit, with
// and without an offloaded optimizer), evaluates the same tokens every time
// and across a resume, is sharded like training (one rank or two: the same
// loss), keeps the best checkpoint across a resume (--keep-best), and refuses
// bad input in one line with status 2 before anything is written.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "executor/checkpoint/checkpoint_store.h"
#include "executor/checkpoint/safetensors.h"
#include "tests/cli_runner.h"
#include "tests/executor/gloo_skip.h"
#include "tests/executor/run_test_support.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::LlmplanErrorLines;
using executor_test::RunLlmplan;

class EvaluationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_evaluation_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    executor_test::WriteStructuredTokens(Path("train.bin"), 40000);
    // Held out: other tokens of the same kind (shifted so no window repeats the training file's).
    std::vector<uint16_t> held(6000);
    for (size_t i = 0; i < held.size(); ++i) held[i] = static_cast<uint16_t>((i * 31 + (i / 89) + 5) % 250);
    std::ofstream(Path("eval.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(held.data()), static_cast<std::streamsize>(held.size() * 2));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A tiny-llama plan for `gpus` CPU ranks, 4 windows of 64 tokens per step.
  std::string MakePlan(int gpus, const std::string& strategy, int micro_batch, const std::string& extra = "",
                       const std::string& lr = "3e-3", int warmup_steps = 2) {
    const std::string path = Path("plan-" + std::to_string(plans_++) + ".json");
    CommandResult r = RunLlmplan("estimate --model tiny-llama --gpus " + std::to_string(gpus) +
                                 " --gpu cpu --seq 64 --global-batch 4 --micro-batch " + std::to_string(micro_batch) +
                                 " --strategy " + strategy + " --lr " + lr + " --warmup-steps " +
                                 std::to_string(warmup_steps) + " " + extra + " -o " + path);
    EXPECT_EQ(r.status, 0) << r.output;
    return path;
  }
  CommandResult Run(const std::string& plan, int steps, const std::string& out, const std::string& extra = "") {
    return RunLlmplan("run --cpu --no-learn --plan " + plan + " --data " + Path("train.bin") + " --steps " +
                      std::to_string(steps) + " --out " + Path(out) + " " + extra);
  }
  std::vector<nlohmann::json> Rows(const std::string& out) const {
    std::vector<nlohmann::json> rows;
    std::ifstream in(Path(out) + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    return rows;
  }
  std::vector<double> Losses(const std::string& out) const {
    std::vector<double> losses;
    for (const auto& row : Rows(out)) losses.push_back(row["loss"].get<double>());
    return losses;
  }
  // step -> eval_loss, for the rows that have one.
  std::map<int64_t, double> EvalLosses(const std::string& out) const {
    std::map<int64_t, double> losses;
    for (const auto& row : Rows(out))
      if (row.contains("eval_loss")) losses[row["step"].get<int64_t>()] = row["eval_loss"].get<double>();
    return losses;
  }
  static void ExpectSameWeights(const std::string& a, const std::string& b) {
    const auto x = checkpoint::ReadSafetensors(a).tensors, y = checkpoint::ReadSafetensors(b).tensors;
    ASSERT_EQ(x.size(), y.size());
    for (const auto& [name, t] : x) {
      ASSERT_TRUE(y.count(name)) << name;
      EXPECT_TRUE(torch::equal(t, y.at(name))) << name << " differs";
    }
  }
  fs::path dir_;
  int plans_ = 0;
};

// Evaluating every other step leaves the training exactly as it was: the
// same losses and final weights bit for bit. With the optimizer offloaded
// the evaluation applies the pending update early (as a checkpoint does),
// which must not change a value either.
TEST_F(EvaluationTest, ChangesNothingTheTrainingComputes) {
  for (const std::string offload : {"", "--offload optimizer"}) {
    SCOPED_TRACE(offload.empty() ? "no offload" : offload);
    const std::string plan = MakePlan(1, "no_shard", 2, offload);
    const std::string tag = offload.empty() ? "plain" : "offload";
    CommandResult plain = Run(plan, 6, tag + "-without");
    ASSERT_EQ(plain.status, 0) << plain.output;
    CommandResult evaluated = Run(plan, 6, tag + "-with", "--eval-data " + Path("eval.bin") + " --eval-every 2");
    ASSERT_EQ(evaluated.status, 0) << evaluated.output;
    EXPECT_EQ(Losses(tag + "-with"), Losses(tag + "-without"));
    ExpectSameWeights(Path(tag + "-with/final.safetensors"), Path(tag + "-without/final.safetensors"));
    const std::map<int64_t, double> eval = EvalLosses(tag + "-with");
    ASSERT_EQ(eval.size(), 3u);  // after steps 2, 4 and 6
    EXPECT_TRUE(eval.count(2) && eval.count(4) && eval.count(6));
    for (const auto& [step, loss] : eval) {
      EXPECT_TRUE(std::isfinite(loss));
      EXPECT_GT(loss, 0);
    }
    EXPECT_EQ(EvalLosses(tag + "-without").size(), 0u);
    EXPECT_NE(evaluated.output.find("| eval loss"), std::string::npos) << evaluated.output;
    const auto summary = nlohmann::json::parse(std::ifstream(Path(tag + "-with/summary.json")));
    ASSERT_TRUE(summary["evaluation"].is_object()) << summary.dump(1);
    EXPECT_EQ(summary["evaluation"]["evaluations"], 3);
    EXPECT_EQ(summary["evaluation"]["last"]["step"], 6);
    EXPECT_DOUBLE_EQ(summary["evaluation"]["last"]["loss"].get<double>(), eval.at(6));
    // 2 micro-batches of 2 windows of 64 tokens would be 256; the default takes the file's first 16.
    EXPECT_EQ(summary["evaluation"]["tokens"], 16 * 2 * 64);
    EXPECT_TRUE(summary["evaluation"]["best"]["loss"].get<double>() <= eval.at(6));
  }
}

// The evaluation reads the same windows every time: a run stopped after step
// 4 and resumed to 6 evaluates exactly as the straight run does, and an
// evaluation with lr 0 (no update between them) gives the same loss twice.
TEST_F(EvaluationTest, SameTokensEveryTimeAndAcrossAResume) {
  const std::string plan = MakePlan(1, "no_shard", 2);
  const std::string eval = "--eval-data " + Path("eval.bin") + " --eval-every 2 --eval-batches 3";
  ASSERT_EQ(Run(plan, 6, "straight", eval).status, 0);
  ASSERT_EQ(Run(plan, 4, "resumed", eval + " --ckpt-dir " + Path("ckpt")).status, 0);
  CommandResult resumed = Run(plan, 6, "resumed", eval + " --ckpt-dir " + Path("ckpt") + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(EvalLosses("resumed"), EvalLosses("straight"));
  EXPECT_EQ(EvalLosses("straight").size(), 3u);

  // No update: every evaluation sees the same parameters and the same tokens.
  const std::string frozen = MakePlan(1, "no_shard", 2, "", "3e-3", 1000);
  ASSERT_EQ(Run(frozen, 3, "frozen", "--lr 1e-12 --eval-data " + Path("eval.bin") + " --eval-every 1").status, 0);
  const std::map<int64_t, double> same = EvalLosses("frozen");
  ASSERT_EQ(same.size(), 3u);
  EXPECT_NEAR(same.at(1), same.at(3), 1e-6);
  EXPECT_NEAR(same.at(2), same.at(3), 1e-6);
}

// Sharded like training: two ranks (full_shard) each evaluate their rows of
// the same global micro-batches, and the loss summed over the world is the
// one-rank run's.
TEST_F(EvaluationTest, TwoRanksEvaluateTheSameTokensAsOne) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string one = MakePlan(1, "no_shard", 2, "", "3e-3", 1000);
  const std::string two = MakePlan(2, "full_shard", 1, "", "3e-3", 1000);
  const std::string eval = " --lr 1e-12 --eval-data " + Path("eval.bin") + " --eval-batches 4";
  CommandResult a = Run(one, 1, "one", eval);
  ASSERT_EQ(a.status, 0) << a.output;
  CommandResult b = Run(two, 1, "two", eval);
  ASSERT_EQ(b.status, 0) << b.output;
  ASSERT_EQ(EvalLosses("one").size(), 1u);
  ASSERT_EQ(EvalLosses("two").size(), 1u);
  EXPECT_NEAR(EvalLosses("one").at(1), EvalLosses("two").at(1), 1e-5);
  const auto summary = nlohmann::json::parse(std::ifstream(Path("two/summary.json")));
  EXPECT_EQ(summary["evaluation"]["tokens"], 4 * 2 * 64);
}

// --keep-best: the checkpoint of the lowest evaluation loss stays beside the
// newest --ckpt-keep; best.json names it; a resumed run goes on comparing
// against it, and the store's pruning never removes it.
TEST_F(EvaluationTest, KeepBestKeepsTheLowestLossAcrossAResume) {
  // A high learning rate: the loss does not fall every step, so the best is
  // not always the newest.
  const std::string plan = MakePlan(1, "no_shard", 2, "", "0.05", 1);
  const std::string flags = "--eval-data " + Path("eval.bin") + " --eval-every 1 --eval-batches 2 --keep-best --ckpt-keep 1 "
                            "--ckpt-dir " + Path("ckpt");
  ASSERT_EQ(Run(plan, 4, "best", flags).status, 0);
  CommandResult resumed = Run(plan, 8, "best", flags + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const std::map<int64_t, double> eval = EvalLosses("best");
  ASSERT_EQ(eval.size(), 8u);
  int64_t best_step = 0;
  for (const auto& [step, loss] : eval)
    if (best_step == 0 || loss < eval.at(best_step)) best_step = step;
  const auto best = nlohmann::json::parse(std::ifstream(Path("ckpt/best.json")));
  EXPECT_EQ(best["step"].get<int64_t>(), best_step);
  EXPECT_DOUBLE_EQ(best["eval_loss"].get<double>(), eval.at(best_step));
  const checkpoint::CheckpointStore store(Path("ckpt"));
  std::vector<int64_t> expected = {best_step};
  if (best_step != 8) expected.push_back(8);
  EXPECT_EQ(store.CompleteSteps(), expected);
  const auto summary = nlohmann::json::parse(std::ifstream(Path("best/summary.json")));
  EXPECT_EQ(summary["evaluation"]["best"]["step"].get<int64_t>(), best_step);
  EXPECT_EQ(summary["evaluation"]["best_checkpoint"].get<std::string>(), store.PathOf(best_step));
  // Only the new bests were flagged, in order.
  double lowest = 1e300;
  for (const auto& row : Rows("best")) {
    const double loss = row["eval_loss"].get<double>();
    EXPECT_EQ(row["eval_best"].get<bool>(), loss < lowest) << "step " << row["step"];
    lowest = std::min(lowest, loss);
  }

  // The store itself: a best.json naming an older checkpoint survives any pruning.
  ASSERT_EQ(Run(plan, 4, "store", "--ckpt-dir " + Path("ckpt2") + " --ckpt-every 1 --ckpt-keep 10").status, 0);
  const checkpoint::CheckpointStore store2(Path("ckpt2"));
  ASSERT_EQ(store2.CompleteSteps(), (std::vector<int64_t>{1, 2, 3, 4}));
  store2.SetBest(checkpoint::BestCheckpoint{2, 1.5});
  store2.Prune(1);
  EXPECT_EQ(store2.CompleteSteps(), (std::vector<int64_t>{2, 4}));
  store2.SetBest(std::nullopt);
  store2.Prune(1);
  EXPECT_EQ(store2.CompleteSteps(), (std::vector<int64_t>{4}));
}

// Each bad input: one line, status 2, and no run directory written.
TEST_F(EvaluationTest, BadInputIsOneLineWithStatus2) {
  const std::string plan = MakePlan(1, "no_shard", 2);
  // Token ids beyond tiny-llama's vocabulary of 512.
  std::vector<uint16_t> other(4000, 700);
  std::ofstream(Path("other_vocab.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(other.data()), static_cast<std::streamsize>(other.size() * 2));
  std::vector<uint16_t> tiny(100, 3);
  std::ofstream(Path("tiny.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(tiny.data()), static_cast<std::streamsize>(tiny.size() * 2));
  const std::string eval = "--eval-data " + Path("eval.bin");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {eval + " --eval-every 0", "--eval-every must be at least 1"},
      {"--eval-every 2", "need --eval-data FILE"},
      {eval + " --eval-batches 0", "--eval-batches must be at least 1"},
      {eval + " --keep-best", "it needs --ckpt-dir"},
      {"--eval-data " + Path("other_vocab.bin"), "outside the model's vocabulary of 512"},
      {"--eval-data " + Path("tiny.bin"), "give a larger held-out file"},
      {eval + " --eval-batches 500", "lower --eval-batches"},
      {"--eval-data " + Path("missing.bin"), "missing.bin"},
  };
  int k = 0;
  for (const auto& [flags, says] : cases) {
    SCOPED_TRACE(flags);
    const std::string out = "bad" + std::to_string(k++);
    CommandResult r = Run(plan, 2, out, flags);
    EXPECT_EQ(r.status, 2) << r.output;
    const std::vector<std::string> lines = LlmplanErrorLines(r.output);
    ASSERT_EQ(lines.size(), 1u) << r.output;
    EXPECT_NE(lines[0].find(says), std::string::npos) << lines[0];
    EXPECT_FALSE(fs::exists(Path(out))) << "nothing is written before the run starts";
  }
}

}  // namespace
}  // namespace llmplan
