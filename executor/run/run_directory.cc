#include "executor/run/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/user_error.h"
#include "executor/run/rank_peaks.h"

namespace llmplan::executor {

namespace fs = std::filesystem;

namespace {

const std::set<std::string>& RunFiles() {
  static const std::set<std::string> files = {"plan.json",    "program.json", "metrics.jsonl",    "op_times.jsonl",
                                               "trace.json",   "summary.json", "final.safetensors"};
  return files;
}

// The files that show a run already happened here.
constexpr const char* kEarlierRunMarkers[] = {"metrics.jsonl", "summary.json", "final.safetensors"};

// Rewrites `path` keeping the JSON lines whose "step" is <= last_step; a
// line that does not parse (torn by a crash) and everything after it go.
void KeepStepsUpTo(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  if (!in) return;
  AtomicFile out(path, "metrics");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) break;
    if (j["step"].get<int64_t>() > last_step) break;
    out.Write(line + "\n");
  }
  out.Commit();
}

}  // namespace

bool IsRunFile(const std::string& name) { return RunFiles().count(name) != 0 || IsRankPeakFile(name); }

double RecordedGpuHours(const std::string& dir) {
  double hours = 0;
  const auto take = [&](const nlohmann::json& j) {
    if (j.is_object() && j.contains("gpu_hours") && j["gpu_hours"].is_number())
      hours = std::max(hours, j["gpu_hours"].get<double>());
  };
  std::ifstream summary(fs::path(dir) / "summary.json");
  if (summary) take(nlohmann::json::parse(summary, nullptr, false));
  // Every line, not the last alone: a crash can tear the last one.
  std::ifstream metrics(fs::path(dir) / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) take(nlohmann::json::parse(line, nullptr, false));
  return hours;
}

void CheckRunDirectory(const std::string& dir, RunDirectoryMode mode) {
  if (dir.empty()) throw UserError("--out is empty: name the run directory for metrics and weights");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw UserError("--out " + dir + " exists and is not a directory: choose another --out");
  if (mode != RunDirectoryMode::kNew) return;
  for (const char* marker : kEarlierRunMarkers) {
    if (fs::exists(fs::path(dir) / marker, ec))
      throw UserError("--out " + dir + " holds an earlier run (" + marker +
                      "): pass --resume to continue it, --overwrite to replace it, or choose another --out");
  }
}

RunDirectoryLock::RunDirectoryLock(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError("cannot create run directory " + dir + ": " + ec.message());
  const std::string path = (fs::path(dir) / ".llmplan.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw UserError("cannot create " + path + ": " + std::strerror(errno) + ": check the directory's permissions");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    throw UserError("another llmplan run" + (n > 0 ? " (pid " + std::string(holder, static_cast<size_t>(n)) + ")" : std::string()) +
                    " is writing to " + dir + ": wait for it or choose another " + flag);
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

void PrepareRunDirectory(const std::string& dir, RunDirectoryMode mode, int64_t resumed_step) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (IsRankPeakFile(e.path().filename().string())) fs::remove(e.path(), ec);
  if (mode == RunDirectoryMode::kOverwrite) {
    for (const std::string& name : RunFiles()) std::remove((fs::path(dir) / name).c_str());
    return;
  }
  if (mode != RunDirectoryMode::kResume) return;
  KeepStepsUpTo((fs::path(dir) / "metrics.jsonl").string(), resumed_step);
  KeepStepsUpTo((fs::path(dir) / "op_times.jsonl").string(), resumed_step);
  for (const char* name : {"summary.json", "trace.json", "final.safetensors"}) std::remove((fs::path(dir) / name).c_str());
}

}  // namespace llmplan::executor
