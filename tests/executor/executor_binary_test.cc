// llmplan-executor as users reach it: through llmplan, which execs it for the
// executor's commands. Its help and version are the ones llmplan shows, and
// every executor command llmplan lists is one the executor has.
#include <string>

#include <gtest/gtest.h>
#include <torch/version.h>

#include "tests/cli_runner.h"
#include "tools/cli/executor_commands.h"

namespace llmplan {
namespace {

using executor_test::CommandResult;
using executor_test::RunExecutor;
using executor_test::RunLlmplan;

TEST(ExecutorBinaryTest, RunHelpThroughLlmplanIsTheExecutors) {
  const CommandResult help = RunLlmplan("run --help");
  EXPECT_EQ(help.status, 0) << help.output;
  EXPECT_NE(help.output.find("Usage: llmplan run"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--cpu-ranks"), std::string::npos) << help.output;
}

TEST(ExecutorBinaryTest, VersionNamesTheLibTorchItWasBuiltWith) {
  // CMake's Torch_VERSION (what --version prints) against the headers compiled here.
  const std::string torch = "LibTorch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
                            std::to_string(TORCH_VERSION_MINOR) + "." + std::to_string(TORCH_VERSION_PATCH);
  const CommandResult planner = RunLlmplan("--version");
  EXPECT_EQ(planner.status, 0) << planner.output;
  EXPECT_NE(planner.output.find("\nexecutor: " + torch), std::string::npos) << planner.output;
  const CommandResult executor = RunExecutor("--version");
  EXPECT_EQ(executor.status, 0) << executor.output;
  EXPECT_EQ(executor.output, planner.output);
}

TEST(ExecutorBinaryTest, EveryCommandLlmplanForwardsIsTheExecutors) {
  const CommandResult planner = RunLlmplan("--help");
  const CommandResult executor = RunExecutor("--help");
  ASSERT_EQ(executor.status, 0) << executor.output;
  for (const cli::ExecutorCommand& command : cli::kExecutorCommands) {
    SCOPED_TRACE(std::string(command.name));
    EXPECT_NE(executor.output.find(command.summary), std::string::npos) << executor.output;
    EXPECT_NE(planner.output.find(command.summary), std::string::npos) << planner.output;
    const CommandResult help = RunLlmplan(std::string(command.name) + " --help");
    EXPECT_EQ(help.status, 0) << help.output;
    EXPECT_NE(help.output.find("Usage: llmplan " + std::string(command.name)), std::string::npos) << help.output;
  }
}

TEST(ExecutorBinaryTest, UnknownCommandIsNamed) {
  const CommandResult r = RunExecutor("estimate");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output, "llmplan: unknown command 'estimate'; commands: run, profile, doctor, export (see llmplan --help)\n");
}

}  // namespace
}  // namespace llmplan
