// `llmplan run` against bad input and faults (issue 11), end to end through
// the built binary on the CPU with Gloo ranks: each case fails in one line
// that names its cause — before step 1 where it can be known then — and every
// rank exits within the collective timeout plus a few seconds. Cases: a token
// id beyond the vocabulary near the end of the file, an llm.c file with a
// damaged magic, a token file truncated while training reads it, seq_len above
// the model's maximum, a rank out of memory, a stuck (SIGSTOP) rank, signals,
// a killed rank 0, progress lines in a log file that a kill -9 keeps.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/token_file.h"
#include "executor/run/preflight.h"
#include "planner/hardware_profile.h"
#include "planner/plan.h"
#include "planner/program_builder.h"
#include "base/user_error.h"
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
using executor_test::CommandResult;
using executor_test::RunLlmplan;

class FaultRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("llmplan_fault_run_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tag_ = "fault" + std::to_string(::getpid()) + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    for (pid_t pid : TaggedProcesses(-1)) ::kill(pid, SIGKILL);  // never leave a rank behind
    fs::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A tiny-llama plan for `gpus` CPU ranks (full_shard when several), seq 64.
  std::string SavePlan(int gpus, int64_t seq_len = 64) {
    Plan plan = executor_test::TinyCpuPlan(gpus, seq_len);
    const std::string path = Path("plan" + std::to_string(gpus) + "_" + std::to_string(seq_len) + ".json");
    std::ofstream(path) << PlanToJson(plan).dump(2);  // not SavePlan: it would refuse a bad seq_len
    return path;
  }

  // Raw uint16 tokens i % 200, with `odd` at `odd_at` (none when negative).
  std::string SaveTokens(const std::string& name, size_t count, int64_t odd_at = -1, uint16_t odd = 0) {
    std::vector<uint16_t> tokens(count);
    for (size_t i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>(i % 200);
    if (odd_at >= 0) tokens[static_cast<size_t>(odd_at)] = odd;
    const std::string path = Path(name);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
    return path;
  }

  // Starts `llmplan <args>` in the background, output to `log`, with `env`
  // added and a tag that finds its processes (the launcher's ranks inherit it).
  pid_t Start(const std::string& args, const std::vector<std::string>& env, const std::string& log) {
    std::vector<std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) vars.emplace_back(*e);
    for (const std::string& v : env) vars.push_back(v);
    vars.push_back("LLMPLAN_FAULT_TEST_TAG=" + tag_);
    std::vector<char*> envp;
    for (std::string& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string command = "exec " + std::string(LLMPLAN_BINARY) + " " + args;
    char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), command.data(), nullptr};
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve("/bin/sh", argv, envp.data());
      ::_exit(127);
    }
    ::close(fd);
    return pid;
  }

  // Waits for `pid` up to `limit`; returns its exit status, or -1 if it had
  // to be killed (then the test fails: something hung).
  int Wait(pid_t pid, std::chrono::seconds limit, double* seconds) {
    const auto start = Clock::now();
    for (;;) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        *seconds = std::chrono::duration<double>(Clock::now() - start).count();
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (Clock::now() - start > limit) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        *seconds = std::chrono::duration<double>(Clock::now() - start).count();
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Processes of this test (by tag) that are rank `rank` (any rank: -1).
  std::vector<pid_t> TaggedProcesses(int rank) const {
    std::vector<pid_t> out;
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return out;
    while (dirent* entry = ::readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
      if (pid <= 0) continue;
      const std::string env = ReadAll("/proc/" + std::to_string(pid) + "/environ");
      std::vector<std::string> vars;
      for (size_t start = 0, end; start < env.size(); start = end + 1) {
        end = env.find('\0', start);
        if (end == std::string::npos) end = env.size();
        vars.push_back(env.substr(start, end - start));
      }
      bool tagged = false, ranked = rank < 0;
      for (const std::string& v : vars) {
        tagged = tagged || v == "LLMPLAN_FAULT_TEST_TAG=" + tag_;
        ranked = ranked || v == "RANK=" + std::to_string(rank);
      }
      if (tagged && ranked) out.push_back(pid);
    }
    ::closedir(proc);
    return out;
  }

  // Waits until `log` contains `text` (or `limit` passes).
  static bool WaitForText(const std::string& log, const std::string& text, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (ReadAll(log).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  fs::path dir_;
  std::string tag_;
};

TEST_F(FaultRunTest, TokenIdBeyondTheVocabularyNearTheEndFailsBeforeStepOne) {
  // 400,001 tokens; id 9999 (vocab 512) at token 399,000: the whole file is
  // checked when the loader opens it, so no step runs.
  const std::string data = SaveTokens("late_bad.u16", 400'001, 399'000, 9999);
  CommandResult r = RunLlmplan("run --plan " + SavePlan(1) + " --data " + data + " --steps 1000 --out " +
                               Path("run") + " --cpu --no-final-weights");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("token id 9999 at token 399000 (byte offset 798000) is >= the model's vocab size 512"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << "failed before step 1: " << r.output;
  EXPECT_EQ(LlmplanErrorLines(r.output).size(), 1u) << r.output;
}

TEST_F(FaultRunTest, LlmcFileWithADamagedMagicIsRefused) {
  std::vector<int32_t> header(data::kLlmcHeaderInts, 0);
  header[0] = data::kLlmcMagicU16 + 1;  // one digit off
  header[1] = 1;
  header[2] = 4096;
  std::vector<uint16_t> tokens(4096, 42);
  const std::string path = Path("damaged.bin");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size() * 4));
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  CommandResult r = RunLlmplan("run --plan " + SavePlan(1) + " --data " + path + " --steps 1 --out " + Path("run") +
                               " --cpu --no-final-weights");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("looks like an llm.c token file (version 1, 4096 tokens, as its size says) but its magic "
                          "is 20240521, not 20240520: the header is damaged"),
            std::string::npos)
      << r.output;
}

TEST_F(FaultRunTest, TokenFileTruncatedWhileTrainingIsAClearErrorNotSigbus) {
  const std::string data = SaveTokens("shrinks.u16", 2'000'001);
  const std::string log = Path("log.txt");
  const pid_t pid = Start("run --plan " + SavePlan(1) + " --data " + data + " --steps 100000 --out " + Path("run") +
                              " --cpu --no-final-weights",
                          {}, log);
  ASSERT_TRUE(WaitForText(log, "step 2/", std::chrono::seconds(120))) << ReadAll(log);
  fs::resize_file(data, 1000);
  double seconds = 0;
  const int status = Wait(pid, std::chrono::seconds(60), &seconds);
  const std::string output = ReadAll(log);
  EXPECT_EQ(status, 2) << output;
  EXPECT_NE(output.find("the token file shrank from 4000002 to 1000 bytes while training read it"), std::string::npos)
      << output;
  EXPECT_EQ(output.find("SIGBUS"), std::string::npos) << output;
}

TEST_F(FaultRunTest, SequenceLongerThanTheModelsMaximumFailsBeforeTraining) {
  const std::string data = SaveTokens("tokens.u16", 10'000);
  CommandResult r = RunLlmplan("run --plan " + SavePlan(1, 2048) + " --data " + data + " --steps 1 --out " +
                               Path("run") + " --cpu --no-final-weights");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("seq_len 2048 is above tiny-llama's max_position_embeddings (1024)"), std::string::npos)
      << r.output;
  EXPECT_EQ(LlmplanErrorLines(r.output).size(), 1u) << r.output;
}

TEST_F(FaultRunTest, OutOfMemoryIsOneLineWithTheOpMeasuredAndPredictedMemoryAndAPlanThatFits) {
  // The real CPU allocator refuses a 1 PiB tensor (LLMPLAN_TEST_OOM_AT) just
  // before op 3 of rank 0's step.
  const std::string data = SaveTokens("tokens.u16", 10'000);
  const std::string log = Path("log.txt");
  const pid_t pid = Start("run --plan " + SavePlan(1) + " --data " + data + " --steps 5 --out " + Path("run") +
                              " --cpu --no-final-weights",
                          {"LLMPLAN_TEST_OOM_AT=0:3"}, log);
  double seconds = 0;
  EXPECT_EQ(Wait(pid, std::chrono::seconds(120), &seconds), 2);
  const std::string output = ReadAll(log);
  const std::vector<std::string> lines = LlmplanErrorLines(output);
  ASSERT_EQ(lines.size(), 1u) << output;
  EXPECT_NE(lines[0].find("llmplan: rank 0: out of memory on cpu in op 3 \""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" allocated, "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("reserved when it failed; the plan predicts a peak of "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("plan again with the same pins and a smaller micro-batch: llmplan estimate --model "
                          "tiny-llama --gpus 1 --gpu cpu --seq 64 --global-batch 2 --strategy no_shard --micro-batch 1"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(output.find("frame #"), std::string::npos) << output;
}

TEST_F(FaultRunTest, RankOutOfMemoryIsNamedAndEveryRankExitsPromptly) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // Rank 1 of 2 fails in its first step; rank 0 is then waiting in a
  // collective. The launcher's line names rank 1, the op and the cause, and
  // both ranks are gone well within the collective timeout.
  const std::string data = SaveTokens("tokens.u16", 10'000);
  const std::string log = Path("log.txt");
  const pid_t pid = Start("run --plan " + SavePlan(2) + " --data " + data + " --steps 5 --out " + Path("run") +
                              " --cpu --cpu-ranks 2 --no-final-weights",
                          {"LLMPLAN_TEST_OOM_AT=1:5", "LLMPLAN_COLLECTIVE_TIMEOUT_S=20"}, log);
  double seconds = 0;
  EXPECT_EQ(Wait(pid, std::chrono::seconds(120), &seconds), 2);
  const std::string output = ReadAll(log);
  EXPECT_NE(output.find("llmplan: rank 1 (pid "), std::string::npos) << output;
  EXPECT_NE(output.find("died: exited with status 2: rank 1: out of memory on cpu in op 5 \""), std::string::npos)
      << output;
  EXPECT_TRUE(TaggedProcesses(-1).empty()) << "every rank has exited";
}

TEST_F(FaultRunTest, StoppedRankIsNamedAndEveryRankExitsWithinTheTimeout) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // SIGSTOP rank 1 mid-run with the collective watchdog at 5 s: rank 0's next
  // collective times out; the launcher names rank 1 (stopped), not rank 0, and
  // nothing is left running about 5 s after the stop.
  const std::string data = SaveTokens("tokens.u16", 200'001);
  const std::string log = Path("log.txt");
  const pid_t pid = Start("run --plan " + SavePlan(2) + " --data " + data + " --steps 100000 --out " + Path("run") +
                              " --cpu --cpu-ranks 2 --no-final-weights",
                          {"LLMPLAN_COLLECTIVE_TIMEOUT_S=5"}, log);
  ASSERT_TRUE(WaitForText(log, "step 2/", std::chrono::seconds(120))) << ReadAll(log);
  const std::vector<pid_t> rank1 = TaggedProcesses(1);
  ASSERT_EQ(rank1.size(), 1u) << "rank 1's process";
  ASSERT_EQ(::kill(rank1[0], SIGSTOP), 0);
  double seconds = 0;
  const int status = Wait(pid, std::chrono::seconds(60), &seconds);
  const std::string output = ReadAll(log);
  // Rank 0's status: 3, from the collective watchdog (Gloo's own timeout is
  // a backstop a few seconds later), as docs/OPERATIONS.md says.
  EXPECT_EQ(status, 3) << output;
  EXPECT_LT(seconds, 5 + 10.0) << "timeout + a few seconds: " << output;
  EXPECT_NE(output.find("llmplan: rank 1 (pid " + std::to_string(rank1[0]) +
                        ") is stuck (stopped: SIGSTOP or a debugger) so rank 0 (pid "),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("gave up: exited with status "), std::string::npos) << output;
  EXPECT_TRUE(TaggedProcesses(-1).empty()) << "every rank has exited";
}

TEST_F(FaultRunTest, ASignalToOneRankStopsTheRunAndTheJobExitsWithThatSignal) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // A scheduler (or a user) that signals one rank, not the launcher: every
  // rank stops at the same step with a checkpoint, and the job's status is
  // 128 + signal, naming the rank that got it, so the job is recorded as
  // stopped, not finished. SIGHUP (a closed terminal) saves as SIGTERM does.
  const std::string data = SaveTokens("tokens.u16", 200'001);
  const std::string plan = SavePlan(2);
  struct Case {
    int rank;
    int signal;
    const char* name;
  };
  for (const Case& c : {Case{1, SIGTERM, "SIGTERM"}, Case{0, SIGINT, "SIGINT"}, Case{1, SIGHUP, "SIGHUP"}}) {
    SCOPED_TRACE(c.name);
    const std::string run = Path(std::string("run_") + c.name), ckpt = Path(std::string("ckpt_") + c.name);
    const std::string log = Path(std::string("log_") + c.name + ".txt");
    const pid_t pid = Start("run --plan " + plan + " --data " + data + " --steps 100000 --out " + run + " --ckpt-dir " +
                                ckpt + " --cpu --cpu-ranks 2 --no-final-weights",
                            {}, log);
    ASSERT_TRUE(WaitForText(log, "step 2/", std::chrono::seconds(120))) << ReadAll(log);
    const std::vector<pid_t> target = TaggedProcesses(c.rank);
    ASSERT_EQ(target.size(), 1u) << "rank " << c.rank << "'s process";
    ASSERT_EQ(::kill(target[0], c.signal), 0);
    double seconds = 0;
    const int status = Wait(pid, std::chrono::seconds(90), &seconds);
    const std::string output = ReadAll(log);
    EXPECT_EQ(status, 128 + c.signal) << output;
    EXPECT_NE(output.find("llmplan: rank " + std::to_string(c.rank) + " (pid " + std::to_string(target[0]) +
                          ") received " + c.name + "; every rank stopped at the same step with a checkpoint"),
              std::string::npos)
        << output;
    const nlohmann::json summary = nlohmann::json::parse(ReadAll(run + "/summary.json"));
    EXPECT_EQ(summary["status"], "stopped") << summary.dump();
    EXPECT_EQ(summary["stopped_by"], c.name) << summary.dump();
    EXPECT_FALSE(summary["last_checkpoint"].get<std::string>().empty()) << summary.dump();
    EXPECT_TRUE(TaggedProcesses(-1).empty()) << "every rank has exited";
  }
}

TEST_F(FaultRunTest, WhenRankZeroIsKilledTheLauncherWritesTheSummary) {
  // Rank 0 writes summary.json; killed with SIGKILL it writes nothing, and the
  // launcher, which saw it die, writes what it knows.
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string data = SaveTokens("tokens.u16", 200'001);
  const std::string log = Path("log.txt");
  const pid_t pid = Start("run --plan " + SavePlan(2) + " --data " + data + " --steps 100000 --out " + Path("run") +
                              " --ckpt-dir " + Path("ckpt") + " --ckpt-every 1 --cpu --cpu-ranks 2 --no-final-weights",
                          {}, log);
  ASSERT_TRUE(WaitForText(log, "step 3/", std::chrono::seconds(120))) << ReadAll(log);
  const std::vector<pid_t> rank0 = TaggedProcesses(0);
  ASSERT_EQ(rank0.size(), 1u) << "rank 0's process";
  ASSERT_EQ(::kill(rank0[0], SIGKILL), 0);
  double seconds = 0;
  const int status = Wait(pid, std::chrono::seconds(90), &seconds);
  const std::string output = ReadAll(log);
  EXPECT_EQ(status, 128 + SIGKILL) << output;
  const nlohmann::json summary = nlohmann::json::parse(ReadAll(Path("run/summary.json")), nullptr, false);
  ASSERT_TRUE(summary.is_object()) << output;
  EXPECT_EQ(summary["status"], "failed") << summary.dump();
  EXPECT_EQ(summary["written_by"], "launcher") << summary.dump();
  EXPECT_NE(summary["error"].get<std::string>().find("rank 0 (pid " + std::to_string(rank0[0]) + ") died: killed by "
                                                      "signal 9 (SIGKILL)"),
            std::string::npos)
      << summary.dump();
  EXPECT_GE(summary["last_step"].get<int64_t>(), 3) << summary.dump();
  EXPECT_NE(summary["last_checkpoint"].get<std::string>().find(Path("ckpt") + "/step-"), std::string::npos)
      << summary.dump();
  EXPECT_TRUE(TaggedProcesses(-1).empty()) << "every rank has exited";
}

// Progress lines reach a log file as each step ends, not when a buffer fills:
// after a kill -9 the log holds every step metrics.jsonl holds (the last one
// may be between its metrics line and its progress line).
TEST_F(FaultRunTest, ProgressLinesReachALogFileEveryStepAndSurviveKillNine) {
  const std::string data = SaveTokens("tokens.u16", 200'001);
  const std::string log = Path("log.txt");
  const pid_t pid = Start("run --plan " + SavePlan(1) + " --data " + data + " --steps 100000 --out " + Path("run") +
                              " --cpu --no-final-weights",
                          {}, log);
  ASSERT_TRUE(WaitForText(log, "step 5/", std::chrono::seconds(120))) << ReadAll(log);
  for (pid_t p : TaggedProcesses(-1)) ::kill(p, SIGKILL);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  std::istringstream metrics(ReadAll(Path("run/metrics.jsonl")));
  int64_t last_step = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && !j.contains("type")) last_step = std::max(last_step, j["step"].get<int64_t>());
  }
  ASSERT_GE(last_step, 5);
  const std::string output = ReadAll(log);
  for (int64_t step = 1; step < last_step; ++step)
    EXPECT_NE(output.find("step " + std::to_string(step) + "/100000 "), std::string::npos) << "step " << step;
}

TEST_F(FaultRunTest, SigtermWhileTheRanksConnectStopsTheJobAtOnce) {
  // Rank 1 comes late; rank 0 waits for it at the rendezvous. A SIGTERM to
  // the launcher then ends every rank within seconds (nothing to save yet),
  // not after the rendezvous timeout.
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string log = Path("log.txt");
  const pid_t pid = Start("run --plan " + SavePlan(2) + " --data " + SaveTokens("tokens.u16", 200'001) +
                              " --steps 10 --out " + Path("run") + " --cpu --cpu-ranks 2 --no-final-weights",
                          {"LLMPLAN_TEST_CONNECT_DELAY=1:120"}, log);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (TaggedProcesses(0).empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(TaggedProcesses(0).empty()) << ReadAll(log);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // rank 0 loads LibTorch and reaches the rendezvous
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  double seconds = 0;
  const int status = Wait(pid, std::chrono::seconds(60), &seconds);
  EXPECT_EQ(status, 128 + SIGTERM) << ReadAll(log);
  EXPECT_LT(seconds, 15.0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("llmplan: received SIGTERM"), std::string::npos) << ReadAll(log);
  EXPECT_TRUE(TaggedProcesses(-1).empty()) << "every rank has exited";
}

TEST_F(FaultRunTest, MoreCpuRanksThanTheMachineCanRunAreRefusedBeforeAnyStarts) {
  // A 1000-GPU plan with --cpu would start 1000 LibTorch processes.
  const auto start = Clock::now();
  CommandResult r = RunLlmplan("run --plan " + SavePlan(1000) + " --data " + SaveTokens("tokens.u16", 10'001) +
                               " --steps 1 --out " + Path("run") + " --cpu --no-final-weights");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(LlmplanErrorLines(r.output).size(), 1u) << r.output;
  EXPECT_NE(r.output.find("the plan is for 1000 GPUs, and --cpu starts one process per GPU"), std::string::npos)
      << r.output;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30.0) << "refused before any rank starts";
  EXPECT_FALSE(fs::exists(Path("run/summary.json")));
}

TEST(PreflightTest, CpuPlanLargerThanTheHostsMemoryIsRefusedInOneLine) {
  Plan plan = executor_test::TinyCpuPlan(2, 64, 4);
  const StepProgram program = BuildStepProgram(plan, LoadHardwareProfile("cpu"));
  const double per_rank = executor::PredictedRankPeakBytes(program);
  ASSERT_GT(per_rank, 1e5);
  EXPECT_NO_THROW(executor::CheckHostMemory(plan, program, 2, 2.5 * per_rank));
  EXPECT_NO_THROW(executor::CheckHostMemory(plan, program, 2, 0)) << "unknown: no judgement";
  try {
    executor::CheckHostMemory(plan, program, 2, 1.5 * per_rank);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.rfind("the plan needs ", 0), 0u) << m;
    EXPECT_NE(m.find(" of host memory per rank (the planner's memory model) x 2 ranks = "), std::string::npos) << m;
    EXPECT_NE(m.find("available (MemAvailable); plan again with the same pins and a smaller micro-batch: llmplan "
                     "estimate --model tiny-llama --gpus 2 --gpu cpu --seq 64 --global-batch 8 --strategy full_shard "
                     "--micro-batch 2"),
              std::string::npos)
        << m;
  }
  // The real host: this tiny plan fits.
  EXPECT_NO_THROW(executor::CheckPlanFitsHost(plan, program, at::Device(at::kCPU), 2));
}

}  // namespace
}  // namespace llmplan
