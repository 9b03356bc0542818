// The llmplan binary itself, as a user meets it before any command runs:
// --version.
#include <gtest/gtest.h>

#include <string>

#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::CliResult;
using testing::RunCli;
using testing::ScratchDir;

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

}  // namespace
}  // namespace llmplan
