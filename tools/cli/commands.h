// The llmplan subcommands. Each Add*Command registers one subcommand on the
// app; its callback runs the command. Callbacks throw UserError for bad input
// (RunCommandLine prints it on one line and exits 2).
#pragma once

namespace CLI {
class App;
}

namespace llmplan::cli {

// llmplan (planner, simulator, feedback and data; no LibTorch).
void AddEstimateCommand(CLI::App& app);  // llmplan estimate
void AddSimulateCommand(CLI::App& app);  // llmplan simulate
void AddCompareCommand(CLI::App& app);   // llmplan compare
void AddCalibrateCommand(CLI::App& app);  // llmplan calibrate
void AddDataCommand(CLI::App& app);       // llmplan data prepare, llmplan data inspect
void AddKernelsCommand(CLI::App& app);    // llmplan kernels

// llmplan-executor (LibTorch); their names and summaries are rows of
// kExecutorCommands (executor_commands.h).
void AddRunCommand(CLI::App& app);      // llmplan run
void AddProfileCommand(CLI::App& app);  // llmplan profile
void AddDoctorCommand(CLI::App& app);   // llmplan doctor
void AddExportCommand(CLI::App& app);   // llmplan export

}  // namespace llmplan::cli
