// The llmplan binary itself, as a user meets it before any command runs: it
// does not load LibTorch (the executor is llmplan-executor, which llmplan
// execs for run and data), --version, --help, an unknown command, no command,
// and an executor command when the executor is not there.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::CliResult;
using testing::ExpectBadInput;
using testing::RunCli;
using testing::RunShell;
using testing::ScratchDir;

TEST(PlannerBinaryTest, DoesNotLinkLibTorch) {
  // ldd lists every shared library the loader would map, dependencies of
  // dependencies included.
  ScratchDir dir;
  CliResult r = RunShell(std::string("ldd '") + LLMPLAN_BINARY + "'", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.out.find("libc.so"), std::string::npos) << "ldd listed nothing: " << r.out;
  for (const char* library : {"libtorch", "libc10", "libgloo", "libnccl", "libcuda"}) {
    EXPECT_EQ(r.out.find(library), std::string::npos) << library << " is linked:\n" << r.out;
  }
}

TEST(PlannerBinaryTest, VersionNamesLlmplanAndTheExecutorsLibraries) {
  ScratchDir dir;
  CliResult r = RunCli("--version", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("llmplan ", 0), 0u) << r.out;
  // "executor: LibTorch X, CPU only", "executor: LibTorch X, CUDA Y, NCCL Z" or "executor: not built (...)".
  const size_t executor = r.out.find("\nexecutor: ");
  ASSERT_NE(executor, std::string::npos) << r.out;
  const std::string line = r.out.substr(executor + 1);
  EXPECT_TRUE(line.rfind("executor: LibTorch ", 0) == 0 || line.rfind("executor: not built", 0) == 0) << line;
  if (line.rfind("executor: LibTorch ", 0) == 0) {
    EXPECT_TRUE(line.find(", CPU only") != std::string::npos ||
                (line.find(", CUDA ") != std::string::npos && line.find(", NCCL ") != std::string::npos))
        << line;
  }
}

TEST(PlannerBinaryTest, HelpListsPlannerAndExecutorCommands) {
  ScratchDir dir;
  CliResult r = RunCli("--help", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* expected :
       {"estimate", "simulate", "compare", "run", "Train a plan", "data", "token files", "--version"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << " missing:\n" << r.out;
  }
}

TEST(PlannerBinaryTest, UnknownCommandIsNamedWithTheCommands) {
  ScratchDir dir;
  ExpectBadInput("frobnicate --model llama3-8b", dir);
  CliResult r = RunCli("frobnicate", dir);
  EXPECT_EQ(r.err,
            "llmplan: unknown command 'frobnicate'; commands: estimate, simulate, compare, calibrate, data, kernels, run, "
            "profile, doctor, export (see llmplan --help)\n");
}

TEST(PlannerBinaryTest, NoCommandPrintsTheHelpAndExits2) {
  // Nothing was done: a script that lost its command word must not succeed.
  ScratchDir dir;
  CliResult r = RunCli("", dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("estimate"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("run"), std::string::npos) << r.err;
}

TEST(PlannerBinaryTest, ExecutorCommandWithoutTheExecutorIsOneLine) {
  ScratchDir dir;
  const std::string run = " run --plan plan.json --data tokens.bin --steps 1 --out r --cpu";
  const CliResult named = RunShell(std::string("LLMPLAN_EXECUTOR=/no/such/llmplan-executor '") + LLMPLAN_BINARY +
                                       "'" + run, dir);
  EXPECT_EQ(named.exit_code, 2) << named.err;
  EXPECT_EQ(named.err,
            "llmplan: LLMPLAN_EXECUTOR is '/no/such/llmplan-executor', which does not exist: point it at a built "
            "llmplan-executor or unset it\n");

  // A copy of llmplan alone in a directory: no executor beside it.
  const std::string alone = dir.File("llmplan");
  std::filesystem::copy_file(LLMPLAN_BINARY, alone);
  std::filesystem::permissions(alone, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  const CliResult beside = RunShell("env -u LLMPLAN_EXECUTOR '" + alone + "' doctor", dir);
  EXPECT_EQ(beside.exit_code, 2) << beside.err;
  EXPECT_EQ(std::count(beside.err.begin(), beside.err.end(), '\n'), 1) << beside.err;
  EXPECT_EQ(beside.err.rfind("llmplan: 'llmplan doctor' needs the executor", 0), 0u) << beside.err;
  EXPECT_NE(beside.err.find("tools/build.sh"), std::string::npos) << beside.err;
}

}  // namespace
}  // namespace llmplan
