// RunLlmplan: runs the built llmplan binary (LLMPLAN_BINARY) with `args` and
// returns its exit status and its stdout and stderr together, for executor
// tests that check the CLI end to end. llmplan is the planner binary: for run,
// profile, doctor and export it execs llmplan-executor, so these tests take the
// user's path.
// RunExecutor runs llmplan-executor (LLMPLAN_EXECUTOR_BINARY) directly.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace llmplan::executor_test {

struct CommandResult {
  int status = -1;     // exit status; -1 if it did not exit normally
  std::string output;  // stdout and stderr
};

// Runs `command` with /bin/sh.
inline CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

inline CommandResult RunLlmplan(const std::string& args) {
  return RunCommand(std::string(LLMPLAN_BINARY) + " " + args);
}

#ifdef LLMPLAN_EXECUTOR_BINARY
inline CommandResult RunExecutor(const std::string& args) {
  return RunCommand(std::string(LLMPLAN_EXECUTOR_BINARY) + " " + args);
}
#endif

}  // namespace llmplan::executor_test
