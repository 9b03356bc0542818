// The executor's subcommands as both binaries know them. The executor links
// LibTorch, whose ~290 shared libraries take about a second to load and
// register, so it is a binary of its own, llmplan-executor: `llmplan run ...`
// replaces the llmplan process with it (ExecExecutor), and the planner
// commands never load LibTorch.
//
// Adding an executor subcommand: a row in kExecutorCommands (llmplan then
// lists it in --help and forwards it) and its Add*Command line in
// tools/llmplan_executor.cc, which takes the summary from the row.
#pragma once

#include <string_view>

namespace CLI {
class App;
}

namespace llmplan::cli {

struct ExecutorCommand {
  std::string_view name;
  const char* summary;  // the one line `llmplan --help` shows
};

inline constexpr ExecutorCommand kExecutorCommands[] = {
    {"run", "Train a plan: one process per GPU of the plan (or --cpu-ranks on the CPU), metrics per step"},
    {"profile", "Measure this machine (GEMMs, attention, memory, copies, NCCL, CPU AdamW) into a hardware profile"},
    {"doctor", "Check this machine before training: GPUs, versions, links, a health all-reduce, NCCL/CUDA variables"},
    {"export", "Write a checkpoint as a Hugging Face model directory (config.json + safetensors)"},
};

bool IsExecutorCommand(std::string_view name);

// REQUIRES: IsExecutorCommand(name).
const char* ExecutorCommandSummary(std::string_view name);

// Adds every executor command to `app` with its summary, so llmplan's --help
// lists them beside its own. They take no options: llmplan execs the executor
// before it parses anything (see tools/llmplan.cc).
void ListExecutorCommands(CLI::App& app);

// Replaces this process with llmplan-executor run with argv[1..argc) (argv[0]
// becomes its path), so signals, stdio and the exit status are the executor's
// own and torchrun's or Slurm's environment reaches it unchanged. The
// executor is $LLMPLAN_EXECUTOR when set, else llmplan-executor in the
// directory of this process's binary.
// Throws UserError naming how to get the executor when it is not there, or
// saying why it could not be run.
// REQUIRES: argc >= 2, IsExecutorCommand(argv[1]), argv[argc] == nullptr.
[[noreturn]] void ExecExecutor(int argc, char** argv);

}  // namespace llmplan::cli
