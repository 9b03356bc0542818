// Comparison: one run held against its prediction — the numbers behind
// `llmplan compare`. The prediction is the run's plan evaluated on a profile
// (EvaluatePlanInDetail); the measurement is the run directory (MeasuredRun).
// Both interpret the same step program, so ops are paired by id, summed into
// classes and held against each other; every figure carries its error,
// (predicted - measured) / measured.
//
// Measured figures are means over the run's timed steps (all but the first,
// which pays for allocator growth and kernel selection), except memory peaks,
// which are the highest over those steps.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "feedback/measured_run.h"
#include "planner/hardware_profile.h"
#include "simulator/evaluate.h"

namespace llmplan {

// (predicted - measured) / measured. 0 when both are 0; NaN when only the
// measured value is 0 (no fraction says how wrong that is).
double RelativeError(double predicted, double measured);

struct ComparedValue {
  double predicted = 0;
  double measured = 0;
  double error() const { return RelativeError(predicted, measured); }
};

// Where a compute class's predicted seconds come from: the cost model's terms
// (CostModel::ComputeTermSeconds) summed over its ops, plus what the
// simulator added. The executor times whole ops, so there is no measured twin.
struct PredictedSplit {
  double gemm_s = 0;
  double attention_s = 0;
  double memory_bound_s = 0;
  double kernel_overhead_s = 0;
  double launch_wait_s = 0;  // where the host's launches outlast the kernels
  double contention_s = 0;   // compute slowed by collectives running beside it
};

// Device seconds per step of one class of ops (forward of blocks, all-gather,
// GPU optimizer, ...), or the compute stream's idle time.
struct OpClassComparison {
  std::string name;  // "forward_blocks", "all_gather", ..., "compute_idle"
  int ops = 0;       // ops of the program in the class (0 for compute_idle)
  ComparedValue seconds;
  bool has_split = false;  // its ops are priced as compute
  PredictedSplit split;
};

// The op during whose issue allocated memory was highest.
struct PeakOp {
  int op = -1;       // -1: nothing was allocated above the persistent bytes
  std::string name;  // the op's name, "" when op is -1
  double bytes = 0;  // allocated bytes at that peak
};

struct Comparison {
  // What was compared.
  Plan plan;
  std::string profile;  // the profile name predicted on
  std::string run_dir, device, memory_source;
  int steps = 0, timed_steps = 0;
  int64_t kernel_traced_step = 0;  // the step --kernel-trace profiled (left out of the timed steps), 0: none

  // Step.
  ComparedValue step_time_s;    // predicted step (program + host overhead) vs measured step_s (data included)
  ComparedValue device_step_s;  // the program's makespan vs the measured latest op end
  ComparedValue exposed_communication_s;
  ComparedValue tokens_per_s_per_gpu;
  ComparedValue mfu;  // both against `profile`'s bf16 peak

  // Memory: predicted Estimate peaks vs the highest over the timed steps.
  ComparedValue peak_allocated_bytes;
  ComparedValue peak_reserved_bytes;
  PeakOp predicted_peak, measured_peak;

  // Per class of ops, in a fixed order, only classes the program has; then
  // compute_idle.
  std::vector<OpClassComparison> classes;

  // For pictures: allocated bytes after each op's issue, by op id — the
  // predicted MemoryTimeline and the measured representative step (the last
  // timed one) — and the loss of every step.
  std::vector<double> predicted_allocated, measured_allocated;
  int64_t representative_step = 0;
  std::vector<std::pair<int64_t, double>> losses;
};

// Holds `run` against `predicted`, the evaluation of the run's plan (or
// another plan with the same program) on `profile`.
// REQUIRES: predicted was made by EvaluatePlanInDetail on `profile`.
// Throws UserError (CheckSameProgram) when the run executed another program.
Comparison Compare(const MeasuredRun& run, const Evaluation& predicted, const HardwareProfile& profile);

// The JSON that `llmplan compare --json` prints (its contract is in
// tools/cli/compare_command.cc). Errors that are NaN are null.
nlohmann::json ComparisonToJson(const Comparison& c);

}  // namespace llmplan
