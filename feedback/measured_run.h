// MeasuredRun: a finished (or interrupted) `llmplan run`, read back from its
// run directory — the measurement side of every comparison and calibration.
// No LibTorch: the files are plain JSON written by executor/run/metrics.h:
//   plan.json, program.json, op_times.jsonl, metrics.jsonl, summary.json (optional:
//   a run that died keeps every finished step), kernel_profile.json (optional:
//   which step --kernel-trace slowed, for runs whose metrics do not say).
// Every measured op is keyed by the StepProgram op id, so the prediction for
// the same plan (BuildStepProgram + Simulate) gives each one its twin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "planner/step_program.h"
#include "simulator/simulator.h"

namespace llmplan {

// One op of the program that ran, as program.json records it.
struct RecordedOp {
  int id = 0;
  std::string name, kind, stream, group;
  int unit = -1, micro_batch = -1;
  std::vector<int> deps;
};

struct MeasuredOp {
  double start_s = 0, end_s = 0;  // where it ran, seconds since the step's start
  double issued_s = 0;            // host clock when it had been issued
  double allocated = 0, reserved = 0;            // bytes after its issue
  double peak_allocated = 0, peak_reserved = 0;  // bytes at the highest while it was issued
  double seconds() const { return end_s - start_s; }
};

struct MeasuredStep {
  int64_t step = 0;  // from 1
  std::vector<MeasuredOp> ops;  // by op id
  std::string memory_source;    // "cuda_caching_allocator", "cpu_tensor_bytes" or "process_peak_rss"
  // From metrics.jsonl.
  double loss = 0, step_s = 0, data_s = 0;
  double tokens_per_s_per_gpu = 0, mfu = 0, hfu = 0;
  double peak_allocated = 0, peak_reserved = 0;
  bool kernel_traced = false;  // the profiler ran around it (--kernel-trace): slower host, not steady state
  // One of the run's first steps (by metrics.jsonl, which keeps every step):
  // allocator growth, kernel selection, NCCL's connections (see TimedSteps).
  bool warm_up = false;
  // The device's makespan: the latest end of any op.
  double OpsMakespan() const;
  // Where each op ran, by op id, as the simulator reports its own.
  std::vector<OpTiming> Spans() const;
};

struct MeasuredRun {
  std::string dir;
  Plan plan;
  std::vector<RecordedOp> program;
  std::vector<MeasuredStep> steps;  // in order, with both op times and metrics
  std::string device;               // from summary.json when present ("cuda:0", "cpu"), else ""
  std::string attention_backend;

  // The steps that measure steady state: all but the run's first two steps
  // when 4 or more were measured, all but its first when 2 or 3 (the first
  // pays for allocator growth and kernel selection, the second on several
  // GPUs for NCCL's connections), and never the kernel-traced step unless it
  // is the only one left. "First" is by metrics.jsonl, which keeps every
  // step, so a run directory whose op_times.jsonl keeps only its last steps
  // (tests/data/runs: two) times all of them. Never empty when `steps` is not.
  std::vector<const MeasuredStep*> TimedSteps() const;
  // Mean over TimedSteps() of an op's measured seconds.
  double MeanSeconds(int op) const;
};

// Reads RUN_DIR. Throws UserError naming the file and what is wrong: a
// missing directory or file, malformed JSON, arrays of the wrong length, a
// run with no finished step.
MeasuredRun LoadMeasuredRun(const std::string& dir);

// Throws UserError unless `program` (rebuilt from the run's plan) has the same
// ops, in the same order, with the same names, as the run recorded: a run of
// an older llmplan, or a plan edited after the run, cannot be compared op by op.
void CheckSameProgram(const MeasuredRun& run, const StepProgram& program);

}  // namespace llmplan
