// RunDirectory: the --out directory of one run, kept safe.
//
//   - An earlier run is never silently replaced: a directory holding one
//     (metrics.jsonl, summary.json or final.safetensors) is refused unless the
//     user says --resume (continue it) or --overwrite (replace its files).
//   - One run at a time: the run's rank 0 holds an exclusive lock
//     (flock on RUN_DIR/.llmplan.lock, released by the kernel when the
//     process dies, so a kill -9 never leaves a stale lock).
//   - A resumed run continues the files: lines of metrics.jsonl and
//     op_times.jsonl for steps after the checkpoint it resumes from (done
//     after that save, about to be redone) and a torn last line are dropped,
//     so the files read as one uninterrupted run.
//
// This header is free of LibTorch (the CLI checks --out before it starts ranks).
#pragma once

#include <cstdint>
#include <string>

namespace llmplan::executor {

enum class RunDirectoryMode {
  kNew,        // refuse a directory holding an earlier run
  kResume,     // continue the earlier run's files (or start them)
  kOverwrite,  // remove the earlier run's files first
};

// Throws UserError when `dir` is empty, is not a directory, or holds an
// earlier run and mode is kNew (the message says which flag to pass).
void CheckRunDirectory(const std::string& dir, RunDirectoryMode mode);

// The files a run writes into its directory (no other file is touched),
// every rank's peak-memory file (rank_peaks.h) included.
bool IsRunFile(const std::string& name);

class RunDirectoryLock {
 public:
  // Creates `dir` and takes its lock (`dir`/.llmplan.lock, released by the
  // kernel when the process dies). Throws UserError when another process
  // holds it (naming that process and `flag`, the option that chose the
  // directory) or the directory cannot be created.
  explicit RunDirectoryLock(const std::string& dir, const std::string& flag = "--out");
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// GPU-hours the earlier run in `dir` recorded (run_cost.h): the largest
// "gpu_hours" in its summary.json and metrics.jsonl; 0 when it recorded none.
// Read it before PrepareRunDirectory, which drops the metrics of the steps a
// resume redoes: their GPU time was paid for all the same, so a resumed run's
// total continues from here, not from its checkpoint's step.
double RecordedGpuHours(const std::string& dir);

// Makes `dir` ready for a run in `mode`: kOverwrite removes the run files;
// kResume keeps the metrics of steps <= resumed_step (0: none) and drops the
// summary, trace, final weights and rank peak files of the earlier attempt;
// every mode removes rank peak files (a new run's ranks write their own).
// REQUIRES: the caller holds the directory's lock. Throws UserError when a
// file cannot be rewritten.
void PrepareRunDirectory(const std::string& dir, RunDirectoryMode mode, int64_t resumed_step);

}  // namespace llmplan::executor
