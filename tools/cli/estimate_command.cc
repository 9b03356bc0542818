#include <CLI/CLI.hpp>
#include "tools/cli/commands.h"
namespace llmplan::cli {
void AddEstimateCommand(CLI::App& app) { app.add_subcommand("estimate", "plan"); }
void AddSimulateCommand(CLI::App& app) { app.add_subcommand("simulate", "simulate"); }
}
