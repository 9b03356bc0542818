// RunReport: what a run reports as it trains and when it ends — a metrics
// line per step (metrics.h), the progress on the console, the cost so far
// and projected (run_cost.h), whether the loader keeps up (loader_watch.h),
// whether host memory keeps growing (host_memory_watch.h), this rank's peak
// memory file (rank_peaks.h), and summary.json however the
// run ends: "completed", "stopped" by a signal, or "failed" with its error.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "executor/run/host_memory_watch.h"
#include "executor/run/loader_watch.h"
#include "executor/run/metrics.h"
#include "executor/run/rank_setup.h"
#include "executor/run/run_cost.h"
#include "executor/run/trainer.h"
#include "executor/run/training_state.h"
#include "executor/step/step_interpreter.h"

namespace llmplan::executor {

// What a step took besides its own measurement.
struct StepTiming {
  double data_s = 0;  // waiting for the step's batches
  double step_s = 0;  // the whole step, batches included
  double run_s = 0;   // of which the step program's Run (issue, device, host bookkeeping)
  bool kernel_traced = false;  // the profiler ran around it: its wall time is left out of the means
};

class RunReport {
 public:
  // Opens the run directory (rank 0; appending when resuming, after the
  // steps the resumed run redoes were dropped), writes plan.json and
  // program.json, and says where a resumed run continues and when the run
  // has no price. Throws UserError when the directory cannot be written.
  RunReport(const TrainConfig& config, const RankSetup& rank, const TrainingState& state,
            std::chrono::steady_clock::time_point run_start);
  RunReport(const RunReport&) = delete;
  RunReport& operator=(const RunReport&) = delete;

  // After a step: its metrics line and progress, the summary's loss and
  // peaks, the throughput means (the run's first step, which warms the
  // allocator up, left out whenever there is another), the loader warning,
  // and this rank's peak memory file. `steps_taken` counts this one.
  // Throws UserError when the line cannot be written (a full disk).
  // `evaluation`: the evaluation after this step, if any, and `best` the
  // lowest so far (both go into the line and the summary's "evaluation").
  void Step(const StepResult& result, const StepTiming& timing, int64_t steps_taken, int64_t data_position,
            const std::optional<EvaluationRow>& evaluation = std::nullopt,
            const std::optional<EvaluationRow>& best = std::nullopt);
  // The step's measured trace (trace.json), for the run's last step.
  void WriteTrace(const StepProgram& program, const StepMeasurement& measurement);
  void Stopped(int signal);  // SIGINT or SIGTERM: the summary says which
  bool stopped() const { return !summary_.stopped_by.empty(); }

  // Writes the summary ("completed", or "stopped") and returns it.
  RunSummary Complete(const std::string& last_checkpoint, int64_t checkpoint_staging_bytes);
  // Writes the summary of a run that failed with `error` (a summary that
  // cannot be written is a warning: the caller rethrows the error).
  void Fail(const std::exception& error, const std::string& last_checkpoint, int64_t checkpoint_staging_bytes);

 private:
  void CompleteSummary(const std::string& last_checkpoint, int64_t checkpoint_staging_bytes);
  // TrainConfig::check_prediction, once, when this process has run enough steps.
  void CheckPrediction(int64_t steps_taken);
  // TrainConfig::predict_at_host_adam, once, from the CPU AdamW ops of the first step that updated.
  void PredictAtHostAdam(const StepMeasurement& measured, int64_t step);
  void RecordPeak(const StepMeasurement& measured, int64_t step);
  void RecordEvaluation(const EvaluationRow& row, const std::optional<EvaluationRow>& best);

  const TrainConfig& config_;
  const RankSetup& rank_;
  std::chrono::steady_clock::time_point run_start_;
  int64_t start_step_;
  double earlier_gpu_hours_;  // a resumed run's, read before its directory drops the steps it redoes
  double peak_flops_, model_flops_, hardware_flops_;
  MetricsLog log_;
  CostMeter cost_;
  LoaderWatch loader_watch_;
  HostMemoryWatch host_memory_watch_;
  RunSummary summary_;
  std::vector<double> eval_seconds_;  // each evaluation's wall time, in order
  // Throughput means over the timed steps.
  double timed_tokens_per_s_ = 0, timed_tokens_per_s_per_gpu_ = 0, timed_mfu_ = 0, timed_hfu_ = 0;
  int64_t timed_steps_ = 0;
  RankPeak own_peak_;
  bool own_peak_writable_;
  bool prediction_checked_ = false;
  int host_adam_tries_ = 0;  // steps PredictAtHostAdam looked at (three at most)
  double at_host_adam_tokens_per_s_per_gpu_ = 0;  // 0: not predicted
};

}  // namespace llmplan::executor
