// Training under a loss mask (data/loss_mask.h; executor/data/micro_batch.h):
// a masked target contributes exactly nothing — not to the loss, not to a
// gradient — and the step's loss is the mean over its trained targets, across
// micro-batches of different trained counts. End to end, `llmplan run` reads
// TOKENFILE.lossmask beside the token file.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "data/loss_mask.h"
#include "executor/data/micro_batch.h"
#include "tests/cli_runner.h"
#include "tests/executor/core_test_support.h"
#include "tests/executor/run_test_support.h"

namespace llmplan::executor {
namespace {

using testing::RandomTokens;
using testing::Rig;
using testing::TestPlan;

Plan UnclippedPlan(int64_t micro_batch, int64_t grad_accum) {
  Plan p = TestPlan("tiny-llama", micro_batch, grad_accum, 32);
  p.optimizer.grad_clip = 0;  // the gradients as the loss makes them
  return p;
}

// `tokens` with the targets (columns 1..) of `untrained` marked.
at::Tensor Masked(at::Tensor tokens, const std::vector<std::pair<int64_t, int64_t>>& untrained) {
  tokens = tokens.clone();
  for (const auto& [row, column] : untrained) tokens[row][column] = tokens[row][column].item<int64_t>() | kUntrainedTarget;
  return tokens;
}

TEST(LossMaskTrainTest, AMaskedTargetContributesExactlyNothing) {
  const Plan plan = UnclippedPlan(2, 1);
  const at::Tensor tokens = RandomTokens(2, 32, plan.model.vocab, 11);
  std::vector<std::pair<int64_t, int64_t>> untrained = {{0, 32}, {1, 32}};  // each row's last: a target only
  for (int64_t c = 1; c < 32; c += 3) untrained.push_back({c % 2, c});
  // The same batch with the masked targets that are no one's input (the
  // last column; the others are the next position's input) set to other ids.
  at::Tensor other = tokens.clone();
  for (int64_t row : {0, 1}) other[row][32] = (tokens[row][32].item<int64_t>() + 7) % plan.model.vocab;
  Rig a(plan), b(plan);
  const StepResult ra = a.step.Run({Masked(tokens, untrained)});
  const StepResult rb = b.step.Run({Masked(other, untrained)});
  EXPECT_EQ(ra.loss, rb.loss);
  EXPECT_TRUE(at::equal(a.AllGrads(), b.AllGrads())) << "a masked target's id reached a gradient";
  // And the mask does something: unmasked, the loss differs.
  Rig c(plan);
  EXPECT_NE(c.step.Run({tokens}).loss, ra.loss);
}

// A row whose every target is masked trains as if it were absent: the loss
// and gradients of the other row alone (a plan of one row).
TEST(LossMaskTrainTest, AFullyMaskedRowIsAsIfAbsent) {
  const at::Tensor tokens = RandomTokens(2, 32, 512, 5);
  std::vector<std::pair<int64_t, int64_t>> second_row;
  for (int64_t c = 1; c <= 32; ++c) second_row.push_back({1, c});
  Rig two(UnclippedPlan(2, 1)), one(UnclippedPlan(1, 1));
  const StepResult masked = two.step.Run({Masked(tokens, second_row)});
  const StepResult alone = one.step.Run({tokens.narrow(0, 0, 1).clone()});
  EXPECT_NEAR(masked.loss, alone.loss, 1e-6 * std::abs(alone.loss));
  const at::Tensor g2 = two.AllGrads(), g1 = one.AllGrads();
  EXPECT_LE((g2 - g1).abs().max().item<double>(), 1e-5 * g1.abs().max().item<double>());
}

// Two micro-batches that train 8 and 24 targets: the step's loss is the mean
// over the 32, not the mean of the two means, and so is its gradient.
TEST(LossMaskTrainTest, TheStepsMeanIsOverItsTrainedTargets) {
  const at::Tensor first = RandomTokens(1, 32, 512, 21), second = RandomTokens(1, 32, 512, 22);
  std::vector<std::pair<int64_t, int64_t>> keep8, keep24;
  for (int64_t c = 1; c <= 32; ++c) {
    if (c > 8) keep8.push_back({0, c});
    if (c > 24) keep24.push_back({0, c});
  }
  Rig step(UnclippedPlan(1, 2));
  const StepResult both = step.step.Run({Masked(first, keep8), Masked(second, keep24)});
  Rig a(UnclippedPlan(1, 1)), b(UnclippedPlan(1, 1));
  const StepResult ra = a.step.Run({Masked(first, keep8)});
  const StepResult rb = b.step.Run({Masked(second, keep24)});
  const double expected = (8 * ra.loss + 24 * rb.loss) / 32;
  EXPECT_NEAR(both.loss, expected, 1e-6 * std::abs(expected));
  EXPECT_GT(std::abs(both.loss - (ra.loss + rb.loss) / 2), 1e-4) << "the mean of means would pass too";
  const at::Tensor g = step.AllGrads(), ga = a.AllGrads(), gb = b.AllGrads();
  const at::Tensor expected_g = (8 * ga + 24 * gb) / 32;
  EXPECT_LE((g - expected_g).abs().max().item<double>(), 1e-5 * expected_g.abs().max().item<double>());
}

// End to end: a mask that trains every token changes nothing bit for bit; one
// that trains half changes the losses; a mask of another file is one line.
TEST(LossMaskTrainTest, RunReadsTheMaskBesideTheTokenFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("llmplan_loss_mask_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto path = [&](const std::string& name) { return (dir / name).string(); };
  const int64_t tokens = 20000;
  executor_test::WriteStructuredTokens(path("plain.bin"), tokens);
  fs::copy_file(path("plain.bin"), path("all.bin"));
  fs::copy_file(path("plain.bin"), path("half.bin"));
  fs::copy_file(path("plain.bin"), path("wrong.bin"));
  auto write_mask = [&](const std::string& file, int64_t count, auto trained) {
    data::LossMaskWriter w(data::LossMaskPathFor(path(file)));
    for (int64_t i = 0; i < count; ++i) w.Add(trained(i));
    w.Commit();
  };
  write_mask("all.bin", tokens, [](int64_t) { return true; });
  write_mask("half.bin", tokens, [](int64_t i) { return (i / 16) % 2 == 0; });
  write_mask("wrong.bin", tokens - 1, [](int64_t) { return true; });
  executor_test::CommandResult plan = executor_test::RunLlmplan(
      "estimate --model tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 4 --micro-batch 2 -o " + path("plan.json"));
  ASSERT_EQ(plan.status, 0) << plan.output;
  auto run = [&](const std::string& data, const std::string& out) {
    return executor_test::RunLlmplan("run --cpu --no-learn --plan " + path("plan.json") + " --data " + path(data) +
                                     " --steps 3 --out " + path(out));
  };
  auto losses = [&](const std::string& out) {
    std::vector<double> l;
    std::ifstream in(path(out) + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) l.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    return l;
  };
  ASSERT_EQ(run("plain.bin", "plain").status, 0);
  ASSERT_EQ(run("all.bin", "all").status, 0);
  ASSERT_EQ(run("half.bin", "half").status, 0);
  EXPECT_EQ(losses("all"), losses("plain"));
  ASSERT_EQ(losses("half").size(), 3u);
  EXPECT_NE(losses("half"), losses("plain"));
  const executor_test::CommandResult wrong = run("wrong.bin", "wrong");
  EXPECT_EQ(wrong.status, 2) << wrong.output;
  const std::vector<std::string> lines = executor_test::LlmplanErrorLines(wrong.output);
  ASSERT_EQ(lines.size(), 1u) << wrong.output;
  EXPECT_NE(lines[0].find("lossmask"), std::string::npos) << lines[0];
  fs::remove_all(dir);
}

}  // namespace
}  // namespace llmplan::executor
