// Ranks of a multi-process test as child processes: each rank is this test
// binary re-run with a gtest filter selecting a "child" test, with the
// torchrun variables set (as torchrun would), because forking a process that
// already ran LibTorch is not safe. The rendezvous port comes from the
// launcher's PickFreePort.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace llmplan::executor_test {

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts rank `rank` of `world`, stdout and stderr to `log_path`, running the
// tests `gtest_filter` selects with `env` added. Returns the child's pid.
inline pid_t SpawnRankProcess(const std::string& gtest_filter, int rank, int world, int port,
                              const std::string& log_path, const std::map<std::string, std::string>& env) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(log, STDOUT_FILENO);
  dup2(log, STDERR_FILENO);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  const std::string filter = "--gtest_filter=" + gtest_filter;
  execl("/proc/self/exe", "/proc/self/exe", filter.c_str(), static_cast<char*>(nullptr));
  _exit(127);
}

struct RankExit {
  int exit_status = -1;  // exit code, or -signal
  bool timed_out = false;
  double seconds = 0;  // since `start`
};

// Waits for `pid` until `start + limit`, then SIGKILLs it.
inline RankExit WaitRankProcess(pid_t pid, std::chrono::steady_clock::time_point start,
                                std::chrono::milliseconds limit) {
  RankExit result;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() - start > limit) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return result;
}

}  // namespace llmplan::executor_test
