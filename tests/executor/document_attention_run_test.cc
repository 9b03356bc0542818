// `llmplan run --attention documents`, end to end on the CPU: documents
// prepared by `data prepare` (its .docs index), a plan estimated with
// --attention documents priced from that data, a run that trains and
// evaluates inside documents and says how the documents fall into windows
// (those longer than the window are split, and counted), and bad input
// refused in one line with status 2 before anything is written.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"
#include "tests/executor/run_test_support.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::LlmplanErrorLines;
using executor_test::RunLlmplan;

class DocumentAttentionRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_document_run_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // 60 documents of 9 to 120 bytes (byte-level tokens), three of them
    // longer than the 64-token window.
    std::ofstream text(Path("docs.txt"));
    for (int d = 0; d < 60; ++d) {
      const int length = d % 20 == 7 ? 120 : 9 + (d * 37) % 50;
      for (int i = 0; i < length; ++i) text << static_cast<char>('a' + (d + i * 3) % 26);
      text << "\n%\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(DocumentAttentionRunTest, EstimatesAndTrainsInsideTheDocuments) {
  CommandResult r = RunLlmplan("data prepare " + Path("docs.txt") + " --split-on-line % --split 0.2 -o " +
                               Path("train.bin"));
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(fs::exists(Path("train.bin.docs")));
  ASSERT_TRUE(fs::exists(Path("train.eval.bin.docs")));

  r = RunLlmplan("estimate --model tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 4 --micro-batch 2 --attention "
                 "documents --data " + Path("train.bin") + " -o " + Path("plan.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  nlohmann::json plan;
  std::ifstream(Path("plan.json")) >> plan;
  EXPECT_EQ(plan.at("attention"), "documents");
  const double work = plan.at("document_attention_work").get<double>();
  // A 64-token window is less than one of flash's 128-row tiles, and each of
  // its pieces costs a whole one: more than the window, which the planner
  // prices on a GPU (on the CPU attention runs under the mask, every tile).
  EXPECT_GT(work, 1.0);

  r = RunLlmplan("run --plan " + Path("plan.json") + " --data " + Path("train.bin") + " --steps 4 --cpu --out " +
                 Path("run") + " --eval-data " + Path("train.eval.bin") + " --eval-every 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("attention kept inside each of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("documents are longer than the window and are split across windows"), std::string::npos)
      << r.output;
  nlohmann::json summary;
  std::ifstream(Path("run/summary.json")) >> summary;
  EXPECT_TRUE(summary.contains("evaluation")) << summary.dump();

  // The same plan over the whole window trains on the same tokens to other losses.
  r = RunLlmplan("run --plan " + Path("plan.json") + " --attention window --data " + Path("train.bin") +
                 " --steps 4 --cpu --out " + Path("run-window"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("attention kept inside"), std::string::npos);
  auto last_loss = [&](const std::string& run) {
    std::ifstream in(Path(run + "/metrics.jsonl"));
    double loss = 0;
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json row = nlohmann::json::parse(line);
      if (row.contains("loss")) loss = row["loss"].get<double>();
    }
    return loss;
  };
  EXPECT_NE(last_loss("run"), last_loss("run-window"));
}

TEST_F(DocumentAttentionRunTest, BadInputIsOneLineAndWritesNothing) {
  // A token file without an index.
  executor_test::WriteStructuredTokens(Path("bare.bin"), 4000);
  CommandResult r = RunLlmplan("estimate --model tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 4 --micro-batch 2 -o " +
                               Path("window.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"run --plan " + Path("window.json") + " --attention documents --data " + Path("bare.bin") +
           " --steps 2 --cpu --out " + Path("bad-run"),
       "has no document index"},
      {"run --plan " + Path("window.json") + " --attention sliding --data " + Path("bare.bin") +
           " --steps 2 --cpu --out " + Path("bad-run"),
       "--attention"},
      {"estimate --model tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 4 --attention documents -o " + Path("bad.json"),
       "give --data TOKENFILE"},
      {"estimate --model tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 4 --attention documents --data " +
           Path("bare.bin") + " -o " + Path("bad.json"),
       "has no document index"},
      {"estimate --model tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 4 --data " + Path("bare.bin") + " -o " +
           Path("bad.json"),
       "has no loss mask and --attention is window"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    r = RunLlmplan(c.args);
    EXPECT_EQ(r.status, 2) << r.output;
    const auto errors = LlmplanErrorLines(r.output);
    ASSERT_EQ(errors.size(), 1u) << r.output;
    EXPECT_NE(errors[0].find(c.says), std::string::npos) << errors[0];
    EXPECT_FALSE(fs::exists(Path("bad-run")));
    EXPECT_FALSE(fs::exists(Path("bad.json")));
  }
}

}  // namespace
}  // namespace llmplan
