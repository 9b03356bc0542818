// llmplan: plan, simulate and run multi-GPU LLM training.
// Exit status: 0 success, 1 a run that failed, 2 bad input (one-line message).
#include <cstdio>
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/user_error.h"
#include "tools/cli/commands.h"
#include "tools/cli/version.h"

int main(int argc, char** argv) {
  CLI::App app{"llmplan: plan, simulate and run multi-GPU LLM training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", llmplan::cli::VersionText(),
                       "Print llmplan's version and the LibTorch, CUDA and NCCL versions it was built with");
  llmplan::cli::AddEstimateCommand(app);
  llmplan::cli::AddSimulateCommand(app);
#ifdef LLMPLAN_WITH_TORCH
  llmplan::cli::AddRunCommand(app);
  llmplan::cli::AddDataCommand(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "llmplan: " << e.what() << " (see llmplan --help)\n";
    return 2;
  } catch (const llmplan::UserError& e) {
    std::cerr << "llmplan: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "llmplan: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
