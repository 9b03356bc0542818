// `llmplan run` builds its step program once — in the CLI, above the
// executor — and hands that one program to the preflight checks, the
// prediction and the step interpreter. The whole command runs here, in this
// process, so every BuildStepProgram call it makes is counted.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include "planner/plan.h"
#include "planner/step_program.h"
#include "tests/executor/run_test_support.h"
#include "tools/cli/command_line.h"
#include "tools/cli/commands.h"

namespace llmplan {
namespace {

int RunInProcess(std::vector<std::string> args) {
  CLI::App app{"llmplan-executor", "llmplan"};
  cli::AddRunCommand(app);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return cli::RunCommandLine(app, static_cast<int>(argv.size()), argv.data());
}

TEST(RunBuildsOneProgramTest, OneBuildForTheChecksThePredictionAndTheSteps) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("llmplan_one_program_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Plan plan = executor_test::TinyCpuPlan(1);
  plan.offload = Offload::kOptimizer;  // the host-memory preflight reads the program too
  plan.Validate();
  SavePlan(plan, (dir / "plan.json").string());
  std::vector<uint16_t> tokens(8192);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 200);
  std::ofstream((dir / "tokens.bin").string(), std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));

  const int64_t before = StepProgramsBuilt();
  const int status = RunInProcess({"llmplan-executor", "run", "--plan", (dir / "plan.json").string(), "--data",
                                   (dir / "tokens.bin").string(), "--steps", "2", "--out", (dir / "run").string(),
                                   "--cpu", "--no-final-weights"});
  ASSERT_EQ(status, 0);
  EXPECT_EQ(StepProgramsBuilt() - before, 1) << "llmplan run builds its step program once";
  // The run's prediction is of that program, and was recorded.
  std::ifstream summary((dir / "run" / "summary.json").string());
  const std::string text((std::istreambuf_iterator<char>(summary)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"predicted_tokens_per_s_per_gpu\""), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace llmplan
