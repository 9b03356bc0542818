// Metrics: what a training run reports, step by step and at the end — the
// measurement that `llmplan compare` holds against the prediction.
//
//   RUN_DIR/plan.json        the plan that ran
//   RUN_DIR/program.json     its step program: per op id, name, kind, stream,
//                            group, unit, micro-batch and deps
//   RUN_DIR/metrics.jsonl    one JSON object per step: step (from 1), loss, lr,
//                            grad_norm, update_skipped, tokens_per_s[_per_gpu], mfu, hfu,
//                            memory peaks, seconds per phase (data, forward,
//                            recompute, backward, optimizer, comm, step), data
//                            position, the plan's predicted tokens/s per GPU,
//                            and the cost so far and projected (run_cost.h:
//                            gpu_hours, eta_s, ...; dollars when priced)
//   RUN_DIR/op_times.jsonl   one JSON object per step, arrays indexed by op id:
//                            start_s and end_s (where the op ran, seconds since
//                            the step's start), issued_s (host clock when it
//                            was issued), allocated / reserved (bytes right
//                            after it was issued), peak_allocated /
//                            peak_reserved (while it was issued), and the
//                            step's memory_source
//   RUN_DIR/trace.json       the last step as a Chrome trace (Perfetto), with
//                            the simulator's track names
//   RUN_DIR/summary.json     the run's summary, written however the run ends:
//                            status "completed", "stopped" (SIGINT/SIGTERM)
//                            or "failed" with the one-line error, the last
//                            step completed and the newest checkpoint; the
//                            cost, every rank's peak memory (rank_peaks.h)
//                            and the time spent waiting for batches
//   RUN_DIR/rank-N.peak_memory.json  rank N's peak memory (rank_peaks.h)
//
// MFU follows PaLM (tokens/s x ModelSpec::ModelFlopsPerToken(seq) / peak);
// HFU adds the recomputed forward of checkpointed blocks
// (llmplan::HardwareFlopsPerToken). The peak is the plan's hardware profile's
// bf16_peak_flops (0 when the profile could not be loaded: MFU and HFU are
// then reported as 0).
//
// On a terminal the progress is one line rewritten in place; otherwise one
// plain line per step, flushed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/run/rank_peaks.h"
#include "executor/run/run_cost.h"
#include "executor/step/step_recorder.h"
#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan::executor {

// One evaluation (executor/run/evaluation.h: --eval-data), as the step's
// metrics line and the summary report it.
struct EvaluationRow {
  int64_t step = 0;
  double loss = 0, perplexity = 0;
  int64_t tokens = 0;  // the whole job's tokens evaluated
  double seconds = 0;  // wall time of the evaluation
  double predicted_seconds = 0;               // the evaluation's program, simulated (0: none)
  int64_t peak_allocated_bytes = 0;           // this rank's, during the evaluation
  double predicted_peak_allocated_bytes = 0;  // (0: none)
  bool best = false;  // the lowest loss so far (with --keep-best: its checkpoint is kept)
};

struct StepMetrics {
  int64_t step = 0;  // optimizer steps taken, this one included (from 1)
  double loss = 0, lr = 0, grad_norm = 0;
  bool update_skipped = false;      // a bad step whose AdamW update was skipped (--bad-step skip)
  bool kernel_traced = false;       // --kernel-trace ran the profiler around this step: its wall time is not steady state
  double tokens_per_s = 0;          // the whole job: all ranks' tokens per second
  double tokens_per_s_per_gpu = 0;  // per rank; MFU and HFU are per GPU too
  double mfu = 0, hfu = 0;
  int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  std::string memory_source;  // "cuda_caching_allocator", "cpu_tensor_bytes" or "process_peak_rss"
  double data_s = 0, forward_s = 0, recompute_s = 0, backward_s = 0, optimizer_s = 0, comm_s = 0;
  double step_s = 0;  // wall time of the whole step, data included
  // Of which (host clock): the step program's Run, and within it, since its
  // device start mark, every op issued and the device's work seen done.
  double run_s = 0, all_issued_s = 0, synced_s = 0, read_s = 0, returned_s = 0;
  int64_t data_position = 0;  // global samples consumed after this step (where a resume continues)
  int64_t host_anon_rss_bytes = 0;  // this rank's anonymous resident host memory after the step (heap, pinned)
  int64_t pinned_host_bytes = 0;  // of which pinned by offload and staging buffers
  double predicted_tokens_per_s_per_gpu = 0;  // the plan's simulated step on its profile (0: none)
  // The same at the host AdamW rate the run measured in its first update
  // (TrainConfig::predict_at_host_adam; 0: no offload, or not yet known).
  double predicted_at_host_adam_tokens_per_s_per_gpu = 0;
  CostSnapshot cost;                          // spent so far and projected to the target (run_cost.h)
  // The evaluation after this step, when there was one: its columns are
  // eval_loss, eval_perplexity, eval_tokens, eval_s, predicted_eval_s,
  // eval_peak_allocated_bytes, predicted_eval_peak_allocated_bytes, eval_best.
  std::optional<EvaluationRow> evaluation;
};

struct RunSummary {
  // How the run ended: "completed" (every step of --steps), "stopped" (a
  // signal: stopped_by says which) or "failed" (error says why).
  std::string status = "completed";
  std::string error;        // the one-line error of a failed run ("" otherwise)
  int64_t last_step = 0;    // optimizer steps taken when it ended: start_step + steps
  int64_t steps = 0;        // optimizer steps this invocation ran
  int64_t start_step = 0;   // steps already taken when it started (a resumed run's checkpoint)
  std::string resumed_from;  // that checkpoint's directory ("" when it started from step 0)
  std::string stopped_by;    // "SIGINT" / "SIGTERM" / "SIGHUP" when a signal ended it early, else ""
  std::string last_checkpoint;  // the newest complete checkpoint in --ckpt-dir when it ended ("" if none)
  double first_loss = 0, final_loss = 0;
  std::vector<double> losses;  // per step
  double mean_tokens_per_s = 0;  // over steps after the first (warm-up excluded when possible); whole job
  double mean_tokens_per_s_per_gpu = 0;
  double mean_mfu = 0, mean_hfu = 0;
  int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  std::string memory_source;
  int64_t peak_pinned_host_bytes = 0;  // offloaded state and staging pinned on the host (0 without offload)
  int64_t peak_host_rss_bytes = 0;     // the process's resident host memory at its peak (pinned included)
  int64_t checkpoint_staging_bytes = 0;  // rank 0's host buffers for --ckpt-async saves (0 without)
  double total_s = 0;
  std::string device;  // "cpu", "cuda:0"
  std::string torch_version;
  std::string attention_backend;  // "math", "flash", "cudnn", ... or "unknown"
  // Cost at the end (run_cost.h), earlier attempts' GPU-hours included.
  CostSnapshot cost;
  double earlier_gpu_hours = 0;
  double predicted_tokens_per_s_per_gpu = 0;  // the plan's (0: its profile could not be loaded)
  RankPeaks rank_peaks;                       // every rank's peak memory; empty without a run directory
  // Batches, over the steps after the first: the share of their wall time
  // spent waiting for them, and the steps that waited more than a tenth of
  // their own (trainer.cc's LoaderWatch).
  double data_wait_fraction = 0;
  int64_t loader_bound_steps = 0;
  // Where the step time strayed from the prediction after the warm-up
  // (TrainConfig::check_prediction): null when it did not, or was not checked.
  nlohmann::json prediction_disagreement;
  // The first update's host AdamW and what it implies (TrainConfig::
  // predict_at_host_adam): null when the run offloads no optimizer.
  nlohmann::json host_adam_prediction;
  // Rank 0's resident host memory that kept growing (host_memory_watch.h):
  // {from_step, to_step, from_bytes, to_bytes, bytes_per_step,
  // bytes_per_hour}, null when it levelled off.
  nlohmann::json host_memory_growth;
  // --eval-data: {every, micro_batches, tokens, evaluations, last, best,
  // mean_s, predicted_s, peak_allocated_bytes,
  // predicted_peak_allocated_bytes, best_checkpoint}; null without.
  nlohmann::json evaluation;
};

class MetricsLog {
 public:
  // Creates run_dir (when not empty) and opens its files, appending to them
  // when `append` (a resumed run); with an empty run_dir nothing is written
  // to disk. `progress`: print a line per step. `per_device`: what one rank
  // is, in the progress lines ("GPU" or "rank").
  // Throws UserError when run_dir cannot be created or written, and from
  // LogStep/Finish as soon as a write fails (a full disk: the message says
  // errno's reason, "No space left on device"), so a run does not train on
  // for hours with its record lost. A line that fails is cut back off its
  // file: metrics.jsonl and op_times.jsonl always end with a whole line.
  MetricsLog(const std::string& run_dir, int64_t total_steps, bool progress, std::string per_device,
             bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // plan.json and program.json.
  void WritePlanAndProgram(const Plan& plan, const StepProgram& program);
  void LogStep(const StepMetrics& m, const StepMeasurement& measurement);
  // The step's measured trace (trace.json), replacing the previous one.
  void WriteTrace(const StepProgram& program, const StepMeasurement& measurement);
  // Prints the summary and writes summary.json (for every status: a failed
  // run's summary is written too). Throws UserError when it cannot be written.
  void Finish(const RunSummary& summary);
  // Progress goes to a terminal (one line rewritten in place): a line printed
  // between steps starts on a new line.
  bool terminal() const { return terminal_; }

 private:
  std::string run_dir_;
  int64_t total_steps_;
  bool progress_;
  bool terminal_;
  std::string per_device_;
  void Print(const RunSummary& summary);  // the summary's lines on stdout
  // Appends `line` and a newline to `fd` whole, or throws UserError naming
  // `name` and errno's reason after cutting off what part of it was written.
  void AppendLine(int fd, const std::string& name, const std::string& line, int64_t step);

  int metrics_fd_ = -1, op_times_fd_ = -1;  // O_APPEND
};

// After a launch of several ranks that failed: RUN_DIR/summary.json, when
// rank 0 wrote it (status "failed") at or after `since`, gets the launcher's
// line as its "error" — the rank that caused the failure, where rank 0 may
// have seen only a consequence (a collective whose peer died) — and keeps
// rank 0's own as "rank0_error". When rank 0 wrote none (it was the rank
// killed), the launcher writes one from what it knows: status "failed", the
// error, the last step of metrics.jsonl and the newest checkpoint in
// `ckpt_dir` ("written_by": "launcher"). A summary that cannot be written
// (a full disk) is left as it is.
// REQUIRES: nothing.
void AmendFailedSummary(const std::string& run_dir, const std::string& ckpt_dir, const std::string& launcher_error,
                        std::filesystem::file_time_type since);

}  // namespace llmplan::executor
