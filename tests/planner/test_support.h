// Helpers shared by the planner and simulator suites: profile loading, a
// scratch directory per test, and running the built llmplan CLI.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "planner/hardware_profile.h"

namespace llmplan::testing {

inline std::string SourceDir() { return LLMPLAN_SOURCE_DIR; }
inline std::string ProfilePath(const std::string& name) { return SourceDir() + "/profiles/" + name + ".json"; }
inline HardwareProfile Profile(const std::string& name) { return LoadHardwareProfile(ProfilePath(name)); }

// A fresh directory under the system temp dir, removed when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("llmplan_test_") + (info ? info->test_suite_name() : "x") + "_" +
                       (info ? info->name() : "y") + "_" + std::to_string(::getpid());
    for (char& c : name)
      if (c == '/') c = '_';
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string File(const std::string& name) const { return (path_ / name).string(); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream out(File(name), std::ios::binary);
    out << text;
    return File(name);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CliResult {
  int exit_code = -1;  // -1: killed by a signal (a crash)
  std::string out, err;
};

// Runs `command` with /bin/sh, stdin from /dev/null.
inline CliResult RunShell(const std::string& command, const ScratchDir& dir) {
  std::string out = dir.File("cli_stdout.txt"), err = dir.File("cli_stderr.txt");
  std::string cmd = command + " >'" + out + "' 2>'" + err + "' </dev/null";
  int status = std::system(cmd.c_str());
  CliResult r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

// Runs `llmplan <args>` (args are passed to /bin/sh as written; quote them).
inline CliResult RunCli(const std::string& args, const ScratchDir& dir) {
  return RunShell(std::string("'") + LLMPLAN_BINARY + "' " + args, dir);
}

// Exit status 2 (bad input), exactly one line on stderr, a message that says who speaks.
inline void ExpectBadInput(const std::string& args, const ScratchDir& dir) {
  SCOPED_TRACE("llmplan " + args);
  CliResult r = RunCli(args, dir);
  EXPECT_EQ(r.exit_code, 2) << "stderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
  EXPECT_FALSE(r.err.empty());
  if (!r.err.empty()) {
    EXPECT_EQ(r.err.back(), '\n');
    EXPECT_EQ(r.err.rfind("llmplan: ", 0), 0u) << r.err;
  }
}

}  // namespace llmplan::testing
