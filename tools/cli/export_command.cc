// llmplan export: a checkpoint as a Hugging Face model directory.
//
//   llmplan export --ckpt CKPT_DIR/step-NNNNNNNN --out HF_DIR [--dtype bf16|fp32] [--overwrite]
//
// The checkpoint's checksums are verified first; HF_DIR gets config.json and
// model.safetensors (or 5 GB shards with model.safetensors.index.json), which
// transformers, vLLM and `llmplan run --init-from` read. A directory that
// already holds a model is replaced only with --overwrite.
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "executor/checkpoint/pretrained_weights.h"
#include "base/user_error.h"
#include "tools/cli/commands.h"
#include "tools/cli/executor_commands.h"

namespace llmplan::cli {

namespace {

struct ExportArgs {
  std::string ckpt;
  std::string out;
  std::string dtype = "bf16";
  bool overwrite = false;
};

// True when `dir` holds what an export writes (an earlier model).
bool HoldsAModel(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : {"config.json", "model.safetensors", "model.safetensors.index.json"})
    if (fs::exists(fs::path(dir) / name, ec)) return true;
  return false;
}

void ExportCommand(const ExportArgs& a) {
  executor::ExportOptions options;
  if (a.dtype == "bf16") {
    options.dtype = at::kBFloat16;
  } else if (a.dtype == "fp32") {
    options.dtype = at::kFloat;
  } else {
    throw UserError("--dtype must be bf16 or fp32, got '" + a.dtype + "'");
  }
  if (!a.overwrite && HoldsAModel(a.out))
    throw UserError("--out " + a.out + " already holds a model (config.json, model.safetensors): pass --overwrite to "
                    "replace it, or another --out");
  const int64_t bytes = executor::ExportCheckpoint(a.ckpt, a.out, options);
  std::printf("exported %s to %s (%.2f GB of %s weights, config.json)\n", a.ckpt.c_str(), a.out.c_str(), bytes / 1e9,
              a.dtype.c_str());
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", ExecutorCommandSummary("export"));
  cmd->add_option("--ckpt", args->ckpt, "Checkpoint directory (CKPT_DIR/step-NNNNNNNN)")->required();
  cmd->add_option("--out", args->out, "Hugging Face model directory to write")->required();
  cmd->add_option("--dtype", args->dtype, "Weights dtype: bf16 (default) or fp32");
  cmd->add_flag("--overwrite", args->overwrite, "Replace the model an earlier export wrote to --out");
  cmd->callback([args] { ExportCommand(*args); });
}

}  // namespace llmplan::cli
