// llmplan run: trains a plan on one device (CUDA device 0, or the CPU with
// --cpu) with the executor, writing metrics to RUN_DIR.
//
//   llmplan run --plan plan.json --data tokens.bin --steps N --out RUN_DIR
//               [--cpu] [--dtype bf16|fp32] [--lr X]
//
// The plan comes from `llmplan estimate ... -o plan.json`; the token file from
// `llmplan data prepare` or any format executor/data/token_file.h reads.
#include <string>

#include <CLI/CLI.hpp>

#include "executor/trainer.h"
#include "planner/plan.h"
#include "planner/user_error.h"
#include "tools/cli/commands.h"

namespace llmplan::cli {

namespace {

struct RunOptions {
  std::string plan_path;
  std::string data_path;
  int64_t steps = 0;
  std::string out;
  bool cpu = false;
  std::string dtype;  // empty: the plan's param_dtype
  double lr = -1;     // < 0: the plan's
};

void RunCommand(const RunOptions& o) {
  executor::TrainConfig config;
  config.plan = LoadPlan(o.plan_path);
  if (!o.dtype.empty()) config.plan.param_dtype = ParseDType(o.dtype);
  if (o.lr >= 0) {
    if (!(o.lr > 0 && o.lr < 1)) throw UserError("--lr must be in (0, 1), got " + std::to_string(o.lr));
    config.plan.optimizer.lr = o.lr;
  }
  if (o.steps < 1) throw UserError("--steps must be at least 1");
  config.steps = o.steps;
  config.run_dir = o.out;
  config.device = o.cpu ? "cpu" : "cuda:0";
  config.progress = true;
  executor::TrainOnTokenFile(config, o.data_path);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "train a plan on one device and record per-step metrics");
  run->add_option("--plan", options->plan_path, "plan JSON (from llmplan estimate -o)")->required();
  run->add_option("--data", options->data_path, "token file (llmplan data prepare, nanoGPT .bin, llm.c .bin)")
      ->required();
  run->add_option("--steps", options->steps, "optimizer steps to run")->required();
  run->add_option("--out", options->out, "run directory for metrics.jsonl, summary.json, op_times.jsonl")
      ->required();
  run->add_flag("--cpu", options->cpu, "train on the CPU instead of CUDA device 0");
  run->add_option("--dtype", options->dtype, "compute dtype, overriding the plan's (bf16 or fp32)");
  run->add_option("--lr", options->lr, "peak learning rate, overriding the plan's");
  run->callback([options] { RunCommand(*options); });
}

}  // namespace llmplan::cli
