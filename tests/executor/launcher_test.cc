// Launcher tests. The ranks are this test binary itself, re-executed by the
// launcher (/proc/self/exe) with a filter that selects LauncherChild.Behave;
// LLMPLAN_LAUNCHER_TEST_MODE tells each rank what to do ("ok,exit3,sleep":
// one mode per rank, the last repeating) and every rank first writes the
// launch environment it saw to LLMPLAN_LAUNCHER_TEST_DIR/rank<R>.env.
#include "executor/launcher/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "executor/comm/distributed_env.h"

namespace llmplan::executor {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kModeVar[] = "LLMPLAN_LAUNCHER_TEST_MODE";
constexpr char kDirVar[] = "LLMPLAN_LAUNCHER_TEST_DIR";
const std::vector<std::string> kLaunchVars = {"RANK",         "LOCAL_RANK",  "WORLD_SIZE",  "LOCAL_WORLD_SIZE",
                                              "GROUP_RANK",   "MASTER_ADDR", "MASTER_PORT", "NCCL_NVLS_ENABLE",
                                              "OMP_NUM_THREADS"};

std::string ModeFor(const std::string& list, int rank) {
  std::vector<std::string> modes;
  std::stringstream in(list);
  for (std::string m; std::getline(in, m, ',');) modes.push_back(m);
  return modes.at(std::min<size_t>(static_cast<size_t>(rank), modes.size() - 1));
}

std::map<std::string, std::string> ReadEnvFile(const fs::path& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

bool WaitForFiles(const fs::path& dir, int ranks, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int present = 0;
    for (int r = 0; r < ranks; ++r) present += fs::exists(dir / ("rank" + std::to_string(r) + ".env")) ? 1 : 0;
    if (present == ranks) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The rank side. Skipped unless a launcher test started this process.
TEST(LauncherChild, Behave) {
  const char* modes = std::getenv(kModeVar);
  if (modes == nullptr) GTEST_SKIP() << "runs only as a rank started by a launcher test";
  const int rank = std::atoi(std::getenv("RANK"));
  const int world = std::atoi(std::getenv("WORLD_SIZE"));
  const fs::path dir = std::getenv(kDirVar);
  const std::string mode = ModeFor(modes, rank);
  // Dispositions before the env file appears: the parent test treats the file
  // as "this rank is ready to be signalled".
  if (mode == "stubborn") ::signal(SIGTERM, SIG_IGN);
  {
    const fs::path tmp = dir / ("rank" + std::to_string(rank) + ".tmp");
    std::ofstream out(tmp);
    for (const std::string& key : kLaunchVars) {
      const char* v = std::getenv(key.c_str());
      out << key << "=" << (v ? v : "<unset>") << "\n";
    }
    // What the communicators will make of it.
    const DistributedEnv env = ReadDistributedEnv();
    out << "env.rank=" << env.rank << "\nenv.world_size=" << env.world_size << "\nenv.local_rank=" << env.local_rank
        << "\nenv.master_port=" << env.master_port << "\nenv.source=" << env.source << "\n";
    out.close();
    fs::rename(tmp, dir / ("rank" + std::to_string(rank) + ".env"));
  }
  if (mode == "ok") ::_exit(0);
  if (mode == "sleep" || mode == "stubborn") {
    for (;;) ::pause();
  }
  if (mode == "stop") {  // a rank someone stopped (SIGSTOP) mid-run
    ::raise(SIGSTOP);
    for (;;) ::pause();
  }
  // Failing modes wait until every rank is up, so the others are running
  // (and stubborn ones ignore SIGTERM) when this one dies.
  WaitForFiles(dir, world, std::chrono::seconds(20));
  if (mode.rfind("exit", 0) == 0) {
    std::fprintf(stderr, "some earlier line\nrank %d failing on purpose\n", rank);
    std::fflush(stderr);
    ::_exit(std::atoi(mode.c_str() + 4));
  }
  if (mode == "sigkill") ::raise(SIGKILL);
  if (mode == "timeout3") {  // what the collective watchdog does when a peer is stuck
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::fprintf(stderr,
                 "llmplan: warning: an earlier warning\nllmplan: rank %d: collective \"all-gather block 0 mb 0\" in "
                 "shard group 0 (gloo) did not finish within 1 s; aborting\n",
                 rank);
    std::fflush(stderr);
    ::_exit(3);
  }
  if (mode == "torch") {  // a LibTorch error as the CLI prints it: message, then the backtrace
    std::fprintf(stderr, "llmplan: error: CUDA out of memory. Tried to allocate 2.00 GiB\n"
                         "Exception raised from malloc at CUDACachingAllocator.cpp:1\n");
    for (int f = 0; f < 38; ++f) std::fprintf(stderr, "frame #%d: <unknown function> + 0x%x (0x0 in libtorch.so)\n", f, f);
    std::fflush(stderr);
    ::_exit(1);
  }
  if (mode == "terminate") {  // an exception nobody caught, on any thread
    std::fprintf(stderr, "terminate called after throwing an instance of 'c10::Error'\n"
                         "  what():  boom in the loader thread\nException raised from x at y.cpp:1\n"
                         "frame #0: c10::Error::Error() + 0x1\n");
    std::fflush(stderr);
    std::abort();
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  ::_exit(99);
}

// Saves and clears the launch variables; restores them at the end.
class ScopedLaunchEnv {
 public:
  ScopedLaunchEnv() {
    for (const char* key : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                            "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID",
                            "SLURM_NODEID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_JOB_NODELIST",
                            "SLURM_NODELIST", kModeVar, kDirVar}) {
      const char* v = std::getenv(key);
      saved_.emplace_back(key, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(key);
    }
  }
  ~ScopedLaunchEnv() {
    for (const auto& [key, value] : saved_) {
      if (value) {
        ::setenv(key.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(key.c_str());
      }
    }
  }
  void Set(const char* key, const std::string& value) { ::setenv(key, value.c_str(), 1); }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_launcher_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    env_.Set(kDirVar, dir_.string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  LaunchSpec Spec(int nprocs, const std::string& modes, int grace_s = 10) {
    env_.Set(kModeVar, modes);
    LaunchSpec spec;
    spec.argv = {"executor_tests", "--gtest_filter=LauncherChild.Behave", "--gtest_brief=1"};
    spec.nprocs = nprocs;
    spec.cpu = true;
    spec.grace = std::chrono::seconds(grace_s);
    return spec;
  }

  // Runs the launch, capturing the launcher's stderr (its own line and the
  // ranks' prefixed lines) into *err and the wall time into *seconds.
  int Launch(const LaunchSpec& spec, std::string* err, double* seconds) {
    const auto start = Clock::now();
    ::testing::internal::CaptureStderr();
    const int rc = LaunchLocalRanks(spec);
    *err = ::testing::internal::GetCapturedStderr();
    *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return rc;
  }

  ScopedLaunchEnv env_;
  fs::path dir_;
};

TEST_F(LauncherTest, AllRanksSucceedAndSeeTheirPlace) {
  std::string err;
  double seconds = 0;
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  ASSERT_EQ(Launch(Spec(3, "ok"), &err, &seconds), 0) << err;
  std::string port;
  for (int r = 0; r < 3; ++r) {
    const auto env = ReadEnvFile(dir_ / ("rank" + std::to_string(r) + ".env"));
    EXPECT_EQ(env.at("RANK"), std::to_string(r));
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(r));
    EXPECT_EQ(env.at("WORLD_SIZE"), "3");
    EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(env.at("GROUP_RANK"), "0");
    EXPECT_EQ(env.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(env.at("NCCL_NVLS_ENABLE"), nvls ? nvls : "0");
    EXPECT_NE(env.at("OMP_NUM_THREADS"), "<unset>");
    const int p = std::atoi(env.at("MASTER_PORT").c_str());
    EXPECT_GT(p, 0);
    EXPECT_LT(p, 65536);
    EXPECT_EQ(env.at("env.rank"), std::to_string(r)) << "ReadDistributedEnv() agrees";
    EXPECT_EQ(env.at("env.world_size"), "3");
    EXPECT_EQ(env.at("env.local_rank"), std::to_string(r));
    EXPECT_EQ(env.at("env.master_port"), env.at("MASTER_PORT"));
    EXPECT_EQ(env.at("env.source"), "torchrun");
    if (r == 0) port = env.at("MASTER_PORT");
    EXPECT_EQ(env.at("MASTER_PORT"), port) << "every rank must rendezvous at the same port";
  }
  EXPECT_EQ(err.find("llmplan: rank"), std::string::npos) << err;
}

TEST_F(LauncherTest, GivenPortIsPassedOn) {
  LaunchSpec spec = Spec(1, "ok");
  spec.master_port = PickFreePort();
  std::string err;
  double seconds = 0;
  ASSERT_EQ(Launch(spec, &err, &seconds), 0) << err;
  EXPECT_EQ(ReadEnvFile(dir_ / "rank0.env").at("MASTER_PORT"), std::to_string(spec.master_port));
}

TEST_F(LauncherTest, FailingRankStopsTheOthersAndIsNamed) {
  std::string err;
  double seconds = 0;
  const int rc = Launch(Spec(3, "sleep,exit3,sleep"), &err, &seconds);
  EXPECT_EQ(rc, 3) << "the failed rank's status";
  // The sleepers act on SIGTERM: no wait for the 10 s grace (checked by the
  // message below, not by wall time, which the ranks' start-up dominates
  // on a loaded machine).
  EXPECT_LT(seconds, 60.0) << err;
  EXPECT_TRUE(WaitForFiles(dir_, 3, std::chrono::seconds(0))) << "all ranks had started";
  EXPECT_NE(err.find("llmplan: rank 1 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find("died: exited with status 3: rank 1 failing on purpose; stopped the other 2 ranks\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("[rank 1] some earlier line\n"), std::string::npos) << "stderr is prefixed: " << err;
  EXPECT_EQ(err.find("needed SIGKILL"), std::string::npos) << err;
}

TEST_F(LauncherTest, RankKilledBySignalIsNamed) {
  std::string err;
  double seconds = 0;
  EXPECT_EQ(Launch(Spec(2, "sigkill,sleep"), &err, &seconds), 128 + SIGKILL);
  EXPECT_NE(err.find("llmplan: rank 0 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find("died: killed by signal 9 (SIGKILL); stopped the other 1 rank\n"), std::string::npos) << err;
}

TEST_F(LauncherTest, RankIgnoringSigtermIsKilledAfterGrace) {
  std::string err;
  double seconds = 0;
  EXPECT_EQ(Launch(Spec(2, "exit3,stubborn", /*grace_s=*/1), &err, &seconds), 3);
  EXPECT_LT(seconds, 60.0) << err;
  EXPECT_NE(err.find("rank 0 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find("stopped the other 1 rank (1 needed SIGKILL after 1."), std::string::npos) << err;  // 1 s of grace, measured
}

TEST_F(LauncherTest, StoppedRankIsNamedAsTheCauseNotTheRankThatTimedOut) {
  // Rank 1 is stopped (SIGSTOP); rank 0's collective times out and it exits 3.
  // The message names rank 1 as stuck, and the stopped rank still exits at
  // once (SIGTERM then SIGCONT), not after the grace period.
  std::string err;
  double seconds = 0;
  EXPECT_EQ(Launch(Spec(2, "timeout3,stop"), &err, &seconds), 3);
  EXPECT_LT(seconds, 60.0) << err;
  EXPECT_NE(err.find("llmplan: rank 1 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find(") is stuck (stopped: SIGSTOP or a debugger) so rank 0 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find(") gave up: exited with status 3: rank 0: collective \"all-gather block 0 mb 0\" in shard "
                     "group 0 (gloo) did not finish within 1 s; aborting; stopped the other 1 rank\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("needed SIGKILL"), std::string::npos) << err;
}

TEST_F(LauncherTest, CauseIsTheErrorLineNotTheLastStackFrame) {
  std::string err;
  double seconds = 0;
  EXPECT_EQ(Launch(Spec(2, "torch,sleep"), &err, &seconds), 1);
  EXPECT_NE(err.find("died: exited with status 1: error: CUDA out of memory. Tried to allocate 2.00 GiB; stopped "
                     "the other 1 rank\n"),
            std::string::npos)
      << err;
  ASSERT_NE(err.find("llmplan: rank 0 (pid "), std::string::npos) << err;
  const std::string line = err.substr(err.find("llmplan: rank 0 (pid "));
  EXPECT_EQ(line.find("frame #"), std::string::npos) << line;
}

TEST_F(LauncherTest, UncaughtExceptionIsQuotedByItsWhat) {
  std::string err;
  double seconds = 0;
  EXPECT_EQ(Launch(Spec(2, "sleep,terminate"), &err, &seconds), 128 + SIGABRT);
  EXPECT_NE(err.find("llmplan: rank 1 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find("died: killed by signal 6 (SIGABRT): boom in the loader thread; stopped the other 1 rank\n"),
            std::string::npos)
      << err;
}

TEST_F(LauncherTest, ForwardsSigtermToTheRanks) {
  int rc = -1;
  std::string err;
  double seconds = 0;
  const LaunchSpec spec = Spec(2, "sleep");
  std::thread launcher([&] { rc = Launch(spec, &err, &seconds); });
  // The env files appear only after the launcher has installed its handlers
  // and started the ranks, so the signal below cannot kill this test.
  const bool started = WaitForFiles(dir_, 2, std::chrono::seconds(20));
  ::kill(::getpid(), SIGTERM);
  launcher.join();
  ASSERT_TRUE(started);
  EXPECT_EQ(rc, 128 + SIGTERM);
  EXPECT_NE(err.find("llmplan: received SIGTERM; stopped 2 ranks\n"), std::string::npos) << err;
}

TEST(LauncherEnvironment, ExternalLauncherDetection) {
  {
    ScopedLaunchEnv env;
    EXPECT_FALSE(UnderExternalLauncher());
    env.Set("RANK", "1");
    EXPECT_FALSE(UnderExternalLauncher()) << "RANK alone is not torchrun";
    env.Set("WORLD_SIZE", "2");
    EXPECT_TRUE(UnderExternalLauncher());
  }
  {
    ScopedLaunchEnv env;
    env.Set("SLURM_PROCID", "0");
    env.Set("SLURM_NTASKS", "1");
    EXPECT_FALSE(UnderExternalLauncher()) << "one Slurm task is the node's launcher";
    env.Set("SLURM_NTASKS", "8");
    EXPECT_TRUE(UnderExternalLauncher());
  }
}

TEST(LauncherEnvironment, SelfArgvIsThisCommand) {
  const std::vector<std::string> argv = SelfArgv();
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(argv[0], program_invocation_name);
}

TEST(LauncherEnvironment, PickFreePortReturnsAPort) {
  const int port = PickFreePort();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

}  // namespace
}  // namespace llmplan::executor
