// The llmplan subcommands. Each Add*Command registers one subcommand on the
// app; its callback runs the command. Callbacks throw UserError for bad input
// (main prints it on one line and exits 2).
#pragma once

namespace CLI {
class App;
}

namespace llmplan::cli {

void AddEstimateCommand(CLI::App& app);  // planner: llmplan estimate
void AddSimulateCommand(CLI::App& app);  // simulator: llmplan simulate

#ifdef LLMPLAN_WITH_TORCH
void AddRunCommand(CLI::App& app);   // executor: llmplan run
void AddDataCommand(CLI::App& app);  // executor: llmplan data prepare
#endif

}  // namespace llmplan::cli
