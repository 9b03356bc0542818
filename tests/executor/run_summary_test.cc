// RUN_DIR/summary.json however a run ends (issue 11), end to end through the
// built binary on the CPU: "completed", "stopped" (SIGTERM) or "failed" with
// the one-line error the process printed, the last step completed and the
// newest checkpoint; a failed run still exits non-zero with that line.
// Failures: the token file truncated while training reads it, out of memory
// in a step (a UserError from the interpreter), a rank of two that fails.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "tests/cli_runner.h"
#include "tests/executor/run_test_support.h"
#include "tests/executor/gloo_skip.h"

extern char** environ;

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::ReadAll;
using executor_test::LlmplanErrorLines;
using Clock = std::chrono::steady_clock;

std::string StepDir(const std::string& ckpt, int64_t step) {
  const std::string digits = std::to_string(step);
  return ckpt + "/step-" + std::string(8 - digits.size(), '0') + digits;
}

class RunSummaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_run_summary_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (pid_ > 0) {  // a run the test gave up on
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A tiny-llama plan for `gpus` CPU ranks (full_shard when several), seq 64.
  std::string SavePlan(int gpus) {
    Plan plan = executor_test::TinyCpuPlan(gpus);
    const std::string path = Path("plan" + std::to_string(gpus) + ".json");
    llmplan::SavePlan(plan, path);
    return path;
  }

  // Raw uint16 tokens i % 200.
  std::string SaveTokens(const std::string& name, size_t count) {
    std::vector<uint16_t> tokens(count);
    for (size_t i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>(i % 200);
    const std::string path = Path(name);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    return path;
  }

  // Starts `llmplan <args>` with `env` added, its output to Path("log.txt").
  void Start(const std::string& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) vars.emplace_back(*e);
    vars.insert(vars.end(), env.begin(), env.end());
    std::vector<char*> envp;
    for (std::string& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string command = "exec " + std::string(LLMPLAN_BINARY) + " " + args;
    char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), command.data(), nullptr};
    const int fd = ::open(Path("log.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve("/bin/sh", argv, envp.data());
      ::_exit(127);
    }
    ::close(fd);
  }
  // Waits for the run (at most `limit`); its exit status, -1 if it hung.
  int Wait(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  bool WaitForText(const std::string& text, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (ReadAll(Path("log.txt")).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  nlohmann::json Summary(const std::string& run) {
    std::ifstream in(Path(run) + "/summary.json");
    if (!in) return nlohmann::json();
    return nlohmann::json::parse(in, nullptr, false);
  }

  fs::path dir_;
  pid_t pid_ = -1;
};

TEST_F(RunSummaryTest, CompletedRunSaysSoWithItsLastStepAndCheckpoint) {
  executor_test::CommandResult r =
      executor_test::RunLlmplan("run --cpu --plan " + SavePlan(1) + " --data " + SaveTokens("tokens.u16", 20'000) +
                                " --steps 3 --out " + Path("run") + " --ckpt-dir " + Path("ckpt") + " --no-final-weights");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json s = Summary("run");
  EXPECT_EQ(s["status"], "completed") << s.dump(1);
  EXPECT_EQ(s["error"], "");
  EXPECT_EQ(s["last_step"], 3);
  EXPECT_EQ(s["steps"], 3);
  EXPECT_EQ(s["last_checkpoint"], StepDir(Path("ckpt"), 3));
}

TEST_F(RunSummaryTest, TokenFileTruncatedMidRunLeavesAFailedSummaryNamingTheLastCheckpoint) {
  const std::string data = SaveTokens("shrinks.u16", 2'000'001);
  Start("run --cpu --plan " + SavePlan(1) + " --data " + data + " --steps 100000 --out " + Path("run") +
        " --ckpt-dir " + Path("ckpt") + " --ckpt-every 2 --no-final-weights");
  ASSERT_TRUE(WaitForText("step 3/", std::chrono::seconds(120))) << ReadAll(Path("log.txt"));
  fs::resize_file(data, 1000);
  const int status = Wait(std::chrono::seconds(60));
  const std::string output = ReadAll(Path("log.txt"));
  EXPECT_EQ(status, 2) << output;
  const std::vector<std::string> errors = LlmplanErrorLines(output);
  ASSERT_EQ(errors.size(), 1u) << output;
  EXPECT_NE(errors[0].find("the token file shrank from 4000002 to 1000 bytes"), std::string::npos) << errors[0];

  const nlohmann::json s = Summary("run");
  ASSERT_TRUE(s.is_object()) << "summary.json is written when the run fails: " << output;
  EXPECT_EQ(s["status"], "failed");
  EXPECT_EQ("llmplan: " + s["error"].get<std::string>(), errors[0]) << "the summary holds the line the user saw";
  const int64_t last = s["last_step"].get<int64_t>();
  EXPECT_GE(last, 3);
  EXPECT_EQ(s["steps"], last);
  EXPECT_EQ(s["losses"].size(), static_cast<size_t>(last));
  // Saved every 2 steps, synchronously: the newest is the last even step.
  EXPECT_EQ(s["last_checkpoint"], StepDir(Path("ckpt"), last / 2 * 2)) << s.dump(1);
  EXPECT_TRUE(fs::exists(s["last_checkpoint"].get<std::string>() + "/manifest.json"));
  EXPECT_NE(output.find("failed at step " + std::to_string(last) + " after " + std::to_string(last) + " steps"),
            std::string::npos)
      << output;
}

TEST_F(RunSummaryTest, OutOfMemoryInTheFirstStepLeavesAFailedSummaryWithNoStepAndNoCheckpoint) {
  // The real CPU allocator refuses a 1 PiB tensor just before op 3 of step 1.
  Start("run --cpu --plan " + SavePlan(1) + " --data " + SaveTokens("tokens.u16", 20'000) + " --steps 5 --out " +
            Path("run") + " --ckpt-dir " + Path("ckpt") + " --no-final-weights",
        {"LLMPLAN_TEST_OOM_AT=0:3"});
  const int status = Wait(std::chrono::seconds(120));
  const std::string output = ReadAll(Path("log.txt"));
  EXPECT_EQ(status, 2) << output;
  const std::vector<std::string> errors = LlmplanErrorLines(output);
  ASSERT_EQ(errors.size(), 1u) << output;
  const nlohmann::json s = Summary("run");
  ASSERT_TRUE(s.is_object()) << output;
  EXPECT_EQ(s["status"], "failed");
  EXPECT_EQ(s["error"].get<std::string>().rfind("rank 0: out of memory on cpu in op 3 ", 0), 0u) << s["error"];
  EXPECT_EQ("llmplan: " + s["error"].get<std::string>(), errors[0]);
  EXPECT_EQ(s["last_step"], 0);
  EXPECT_EQ(s["steps"], 0);
  EXPECT_EQ(s["last_checkpoint"], "");
}

TEST_F(RunSummaryTest, SigtermStopsWithAStoppedSummary) {
  Start("run --cpu --plan " + SavePlan(1) + " --data " + SaveTokens("tokens.u16", 200'001) + " --steps 100000 --out " +
        Path("run") + " --ckpt-dir " + Path("ckpt") + " --no-final-weights");
  ASSERT_TRUE(WaitForText("step 2/", std::chrono::seconds(120))) << ReadAll(Path("log.txt"));
  ::kill(pid_, SIGTERM);
  const int status = Wait(std::chrono::seconds(60));
  const std::string output = ReadAll(Path("log.txt"));
  EXPECT_EQ(status, 128 + SIGTERM) << output;
  const nlohmann::json s = Summary("run");
  ASSERT_TRUE(s.is_object()) << output;
  EXPECT_EQ(s["status"], "stopped");
  EXPECT_EQ(s["stopped_by"], "SIGTERM");
  EXPECT_EQ(s["error"], "");
  const int64_t last = s["last_step"].get<int64_t>();
  EXPECT_GE(last, 2);
  EXPECT_EQ(s["last_checkpoint"], StepDir(Path("ckpt"), last)) << "saved at the step it stopped after";
}

TEST_F(RunSummaryTest, RankThatFailsLeavesASummaryNamingItNotRankZerosView) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // Rank 1 of 2 runs out of memory in step 1; rank 0's collective then fails
  // (its peer is gone). Rank 0 writes the summary; the launcher puts its own
  // line, which names rank 1 and why, in it: the line the user saw.
  Start("run --cpu --cpu-ranks 2 --plan " + SavePlan(2) + " --data " + SaveTokens("tokens.u16", 20'000) +
            " --steps 50 --out " + Path("run") + " --no-final-weights",
        {"LLMPLAN_TEST_OOM_AT=1:5", "LLMPLAN_COLLECTIVE_TIMEOUT_S=20"});
  const int status = Wait(std::chrono::seconds(120));
  const std::string output = ReadAll(Path("log.txt"));
  EXPECT_EQ(status, 2) << output;
  std::string launcher_line;
  for (const std::string& line : LlmplanErrorLines(output))
    if (line.rfind("llmplan: rank 1 (pid ", 0) == 0) launcher_line = line;
  ASSERT_FALSE(launcher_line.empty()) << output;
  const nlohmann::json s = Summary("run");
  ASSERT_TRUE(s.is_object()) << output;
  EXPECT_EQ(s["status"], "failed");
  EXPECT_EQ("llmplan: " + s["error"].get<std::string>(), launcher_line);
  EXPECT_NE(s["error"].get<std::string>().find("died: exited with status 2: rank 1: out of memory on cpu in op 5 "),
            std::string::npos)
      << s["error"];
  EXPECT_EQ(s["rank0_error"].get<std::string>().rfind("rank 0: ", 0), 0u) << "rank 0's own view: " << s["rank0_error"];
  EXPECT_EQ(s["last_step"], 0);
}

}  // namespace
}  // namespace llmplan
