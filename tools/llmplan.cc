// llmplan: plan, simulate and run multi-GPU LLM training.
// This binary holds the planner commands and never loads LibTorch, so it
// starts in milliseconds; the executor commands (run, profile, doctor, export) are
// llmplan-executor's, which this process becomes (tools/cli/executor_commands.h).
// Exit status: 0 success, 1 a run that failed, 2 bad input (one-line message).
#include <iostream>

#include <CLI/CLI.hpp>

#include "base/user_error.h"
#include "tools/cli/command_line.h"
#include "tools/cli/commands.h"
#include "tools/cli/executor_commands.h"

int main(int argc, char** argv) {
  using namespace llmplan::cli;
  // Before any parsing: the executor's options are the executor's to parse.
  if (argc > 1 && IsExecutorCommand(argv[1])) {
    try {
      ExecExecutor(argc, argv);
    } catch (const llmplan::UserError& e) {
      std::cerr << "llmplan: " << e.what() << "\n";
      return 2;
    }
  }
  CLI::App app{"llmplan: plan, simulate and run multi-GPU LLM training", "llmplan"};
  AddEstimateCommand(app);
  AddSimulateCommand(app);
  AddCompareCommand(app);
  AddCalibrateCommand(app);
  AddDataCommand(app);
  AddKernelsCommand(app);
  ListExecutorCommands(app);
  return RunCommandLine(app, argc, argv);
}
