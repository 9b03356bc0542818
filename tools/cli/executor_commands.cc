#include "tools/cli/executor_commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/user_error.h"
#include "tools/cli/build_info.h"

namespace llmplan::cli {

namespace {

constexpr char kExecutorFileName[] = "llmplan-executor";

const ExecutorCommand* Find(std::string_view name) {
  for (const ExecutorCommand& command : kExecutorCommands) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

// Beside the running llmplan, wherever it was installed or built; not found
// through argv[0], which need not be a path (PATH lookup, torchrun).
std::string ExecutorBesideThisBinary() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return kExecutorFileName;  // left to execv's error
  return (self.parent_path() / kExecutorFileName).string();
}

std::string MissingExecutorMessage(const std::string& command, const std::string& path, bool from_environment) {
  if (from_environment) {
    return "LLMPLAN_EXECUTOR is '" + path + "', which does not exist: point it at a built " + kExecutorFileName +
           " or unset it";
  }
  if (build_info::kTorchVersion[0] == '\0') {
    return "'llmplan " + command + "' needs the executor, which this build lacks (it was configured without "
           "LibTorch): install LibTorch (tools/install_deps.sh) and rebuild with tools/build.sh";
  }
  return "'llmplan " + command + "' needs the executor, " + path +
         ", which is missing: rebuild with tools/build.sh, or set LLMPLAN_EXECUTOR to its path";
}

}  // namespace

bool IsExecutorCommand(std::string_view name) { return Find(name) != nullptr; }

const char* ExecutorCommandSummary(std::string_view name) { return Find(name)->summary; }

void ListExecutorCommands(CLI::App& app) {
  for (const ExecutorCommand& command : kExecutorCommands) {
    app.add_subcommand(std::string(command.name), command.summary);
  }
}

void ExecExecutor(int argc, char** argv) {
  const char* from_environment = std::getenv("LLMPLAN_EXECUTOR");
  const bool use_environment = from_environment != nullptr && *from_environment != '\0';
  std::string path = use_environment ? from_environment : ExecutorBesideThisBinary();
  std::vector<char*> executor_argv(argv, argv + argc + 1);
  executor_argv[0] = path.data();
  ::execv(path.c_str(), executor_argv.data());
  // Only reached when execv failed.
  if (errno == ENOENT) throw UserError(MissingExecutorMessage(argv[1], path, use_environment));
  throw UserError("cannot run the executor " + path + " (" + std::strerror(errno) + ")");
}

}  // namespace llmplan::cli
