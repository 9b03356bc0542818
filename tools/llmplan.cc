// llmplan: plan, simulate and run multi-GPU LLM training.
// Exit status: 0 success, 1 a run that failed, 2 bad input (one-line message).
#include <cstdio>
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/user_error.h"
#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"llmplan: plan, simulate and run multi-GPU LLM training"};
  app.require_subcommand(1);
  llmplan::cli::AddEstimateCommand(app);
  llmplan::cli::AddSimulateCommand(app);
#ifdef LLMPLAN_WITH_TORCH
  llmplan::cli::AddRunCommand(app);
  llmplan::cli::AddDataCommand(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
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
