// Fine-tuning as a user does it, end to end on the CPU: conversations
// rendered with Llama 3's real tokenizer into a token file, its loss mask and
// a held-out split (data prepare --chat --split); a model of Llama 3's
// vocabulary started from a Hugging Face directory (--init-from, made by
// export); trained under the mask with an evaluation every few steps and the
// best checkpoint kept. The held-out loss falls, and only the assistant's
// tokens were trained.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::RunLlmplan;

TEST(FineTuneTest, ChatDataInitFromEvaluationAndTheBestCheckpoint) {
  const fs::path dir = fs::temp_directory_path() / ("llmplan_fine_tune_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "base");
  auto path = [&](const std::string& name) { return (dir / name).string(); };
  // A Llama-3-vocabulary model small enough for a CPU test.
  std::ofstream(path("base/config.json")) << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 128256, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "tie_word_embeddings": false})";
  {
    const char* questions[] = {"What is the capital of France?", "Name a prime number.", "What is 2+2?",
                               "Who wrote Hamlet?", "What colour is the sky?", "Translate 'hello' into Spanish."};
    const char* answers[] = {"Paris.", "Seven.", "Four.", "William Shakespeare.", "Blue.", "Hola."};
    std::ofstream chats(path("chats.jsonl"));
    for (int i = 0; i < 300; ++i)
      chats << nlohmann::json{{"messages",
                               {{{"role", "system"}, {"content", "You answer briefly."}},
                                {{"role", "user"}, {"content", questions[i % 6]}},
                                {{"role", "assistant"}, {"content", answers[i % 6]}}}}}
                   .dump()
            << "\n";
  }
  const std::string tokenizer = std::string(LLMPLAN_TOKENIZER_FIXTURES) + "/llama3/tokenizer.json";
  CommandResult prepared = RunLlmplan("data prepare --chat " + path("chats.jsonl") + " --tokenizer " + tokenizer +
                                      " -o " + path("chat.bin") + " --split 0.1");
  ASSERT_EQ(prepared.status, 0) << prepared.output;
  ASSERT_TRUE(fs::exists(path("chat.bin.lossmask")));
  ASSERT_TRUE(fs::exists(path("chat.eval.bin.lossmask")));

  CommandResult plan = RunLlmplan("estimate --model " + path("base/config.json") +
                                  " --gpus 1 --gpu cpu --seq 128 --global-batch 4 --micro-batch 2 -o " + path("plan.json"));
  ASSERT_EQ(plan.status, 0) << plan.output;
  // The "pretrained" model: two steps, exported as a Hugging Face directory.
  ASSERT_EQ(RunLlmplan("run --cpu --no-learn --plan " + path("plan.json") + " --data " + path("chat.bin") +
                       " --steps 2 --out " + path("pre") + " --ckpt-dir " + path("pre-ckpt") + " --no-final-weights")
                .status,
            0);
  ASSERT_EQ(RunLlmplan("export --ckpt " + path("pre-ckpt/step-00000002") + " --out " + path("hf")).status, 0);

  CommandResult tuned = RunLlmplan("run --cpu --no-learn --plan " + path("plan.json") + " --data " + path("chat.bin") +
                                   " --init-from " + path("hf") + " --eval-data " + path("chat.eval.bin") +
                                   " --eval-every 5 --keep-best --ckpt-dir " + path("ckpt") +
                                   " --steps 20 --lr 3e-3 --no-final-weights --out " + path("tuned"));
  ASSERT_EQ(tuned.status, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("training with the loss mask"), std::string::npos) << tuned.output;
  const auto summary = nlohmann::json::parse(std::ifstream(path("tuned/summary.json")));
  const auto& eval = summary["evaluation"];
  ASSERT_TRUE(eval.is_object()) << summary.dump(1);
  EXPECT_EQ(eval["evaluations"], 4);  // after steps 5, 10, 15, 20
  // Learning the answers: the held-out loss (the assistant's tokens only) falls.
  std::vector<double> eval_losses;
  std::ifstream metrics(path("tuned/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto row = nlohmann::json::parse(line);
    if (row.contains("eval_loss")) eval_losses.push_back(row["eval_loss"].get<double>());
  }
  ASSERT_EQ(eval_losses.size(), 4u);
  EXPECT_LT(eval_losses.back(), eval_losses.front() - 0.5);
  const auto best = nlohmann::json::parse(std::ifstream(path("ckpt/best.json")));
  EXPECT_TRUE(fs::exists(path("ckpt/" + best["checkpoint"].get<std::string>() + "/manifest.json")));

  // The head is priced by the share of targets the mask trains: estimate
  // --data records it, and run sets it from its data whatever plan it got
  // (this one was made without --data).
  CommandResult masked = RunLlmplan("estimate --model " + path("base/config.json") + " --gpus 1 --gpu cpu --seq 128 "
                                    "--global-batch 4 --micro-batch 2 --data " + path("chat.bin") + " -o " +
                                    path("masked.plan.json"));
  ASSERT_EQ(masked.status, 0) << masked.output;
  EXPECT_NE(masked.output.find("of the targets (the data's loss mask)"), std::string::npos) << masked.output;
  const double share = nlohmann::json::parse(std::ifstream(path("masked.plan.json"))).at("trained_fraction").get<double>();
  EXPECT_GT(share, 0.1);
  EXPECT_LT(share, 1.0);
  EXPECT_FALSE(nlohmann::json::parse(std::ifstream(path("plan.json"))).contains("trained_fraction"));
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(std::ifstream(path("tuned/plan.json"))).at("trained_fraction").get<double>(),
                   share);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace llmplan
