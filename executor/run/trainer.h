// Trainer: the training loop of `llmplan run`, reading top to bottom in one
// place (trainer.cc's Train): set up the rank (rank_setup.h); build the model,
// its sharded units, the optimizer and the step interpreter over the run's
// StepProgram (training_state.h); then for each step take its micro-batches,
// run the program, report (run_report.h) and checkpoint (run_checkpoints.h).
//
// Everything that decides what the run computes is explicit and plain data:
// the seed (plan.seed: initial weights), the data position (the BatchSource's
// sample count) and the optimizer state (AdamWState, with its step count), so
// a checkpoint can capture and restore a run exactly.
//
// This header is free of LibTorch so the CLI compiles quickly.
#pragma once


#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "executor/checkpoint/manifest.h"
#include "executor/run/bad_step.h"
#include "executor/run/kernel_trace.h"
#include "executor/run/metrics.h"
#include "executor/run/run_directory.h"
#include "planner/hardware_profile.h"
#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan::executor {

class BatchSource;

struct TrainConfig {
  Plan plan;
  // Made from the plan above the executor, once (llmplan run:
  // tools/cli/run_command.cc), and handed in:
  HardwareProfile profile;  // the plan's: MFU's peak, the price per GPU-hour (defaults when it is not here)
  StepProgram program;      // BuildStepProgram(plan, profile): what every step runs
  double predicted_tokens_per_s_per_gpu = 0;  // the simulator's prediction for the program (0: none)
  KernelTraceReader read_kernel_trace;        // what --kernel-trace's trace is summed up with (may be empty)
  // What the run holds its step time against once the warm-up is behind it
  // (llmplan run: the machine's calibrated profile, else the plan's; may be
  // empty). Rank 0 calls it once, with run_dir, after the step that leaves
  // three timed steps past the warm-up there (or after the run's last step,
  // from its third): null when the run agrees with its prediction, else an
  // object whose "message" the run prints and which the summary keeps as
  // prediction_disagreement. Its exceptions are not the run's: ignored.
  std::function<nlohmann::json(const std::string& run_dir)> check_prediction;
  // Optimizer offload: the host's AdamW varies from machine to machine and
  // day to day (one H200 host: 21% between two days), more than anything the
  // profile measured. Given the seconds a step's CPU AdamW ops took, the
  // tokens/s per GPU the program predicts at that host rate; 0 when those
  // seconds are too few for an update that did its work (a step applies the
  // update of the step before it: a run's first step applies none). Rank 0 calls it after each of its first
  // steps whose update was not skipped, until it predicts (three at most);
  // the progress lines then hold each step against it too. May be empty;
  // its exceptions are ignored.
  std::function<double(double cpu_adam_seconds)> predict_at_host_adam;
  int64_t steps = 0;            // train until this many optimizer steps were taken (a resumed run counts its earlier ones)
  std::string run_dir;          // metrics.jsonl, summary.json, ...; empty: write nothing
  RunDirectoryMode run_dir_mode = RunDirectoryMode::kNew;  // an earlier run in run_dir: refuse, continue or replace
  std::string device = "cuda";  // "cpu", "cuda" or "cuda:N"
  bool progress = true;         // print a line per step and the summary
  bool final_weights = true;    // write run_dir/final.safetensors at the end (an 8B model: 32 GB)

  // Checkpoints (executor/checkpoint/): saved into ckpt_dir after every
  // ckpt_every steps (0: only at the end and when stopped by SIGINT/SIGTERM),
  // the newest ckpt_keep kept; ckpt_async writes them in the background.
  std::string ckpt_dir;
  int64_t ckpt_every = 0;
  int ckpt_keep = 2;
  bool ckpt_async = false;
  // Continue from the newest complete checkpoint in ckpt_dir (none there:
  // start at step 0), or from the checkpoint directory resume_from.
  bool resume = false;
  std::string resume_from;
  // Start from pretrained weights: a Hugging Face directory (model.safetensors
  // or a sharded index) whose tensors match the plan's model. init_partial
  // loads them although the file holds tensors the model does not use (they
  // are listed).
  std::string init_from;
  bool init_partial = false;
  // The token file trained on (set by TrainOnTokenFile): recorded in each
  // checkpoint, and a resume on another file is refused unless data_changed.
  checkpoint::DataIdentity data;
  bool data_changed = false;
  // Resume a checkpoint saved by a plan with another seed or sequence length
  // (its data position then names other samples): refused unless
  // plan_changed. Strategy, GPUs, batch and optimizer may differ.
  bool plan_changed = false;
  // A step whose loss or gradient norm is not finite or spikes
  // (executor/run/bad_step.h): stop the run, or skip its update.
  BadStepPolicy bad_step;
  // Cost (executor/run/run_cost.h): dollars per GPU-hour (< 0: the plan's
  // profile's price_per_gpu_hour; 0: no price, so no dollar figures) and the
  // token count the projection aims at (0: steps x the plan's tokens per step).
  double price_per_gpu_hour = -1;
  int64_t target_tokens = 0;
  // TrainOnTokenFile's batch loader (executor/data/batch_loader.h): threads
  // reading micro-batches, and micro-batches read ahead.
  int loader_workers = 1;
  int loader_prefetch = 4;
  // NVMe offload (plan.offload_to nvme): the directory on a local SSD where
  // each rank keeps its AdamW state file (required for such plans; checked
  // for room before anything is allocated).
  std::string nvme_dir;
  // Trace this step (from 1; 0: none) with LibTorch's profiler
  // (executor/run/kernel_trace.h): kernel_trace.json and kernel_profile.json
  // in run_dir, written by rank 0.
  int64_t kernel_trace_step = 0;
  // Evaluation (executor/run/evaluation.h): the loss on eval_data's held-out
  // tokens after every eval_every steps and after the last, by eval_program
  // (BuildEvaluationProgram with the micro-batches asked, made above the
  // executor like `program`), with its predicted seconds and peak allocated
  // bytes (0: none). keep_best keeps the checkpoint of the lowest
  // evaluation loss beside the newest ckpt_keep (needs ckpt_dir).
  std::string eval_data;
  int64_t eval_every = 0;
  StepProgram eval_program;
  double predicted_eval_seconds = 0;
  double predicted_eval_peak_allocated_bytes = 0;
  bool keep_best = false;
};

// Trains config.plan for config.steps optimizer steps on micro-batches from
// `data` (this rank's). Returns the summary (also written to
// run_dir/summary.json, status "completed" or "stopped").
//
// Failure: an exception once training has started (a step's UserError, out
// of memory, a token file truncated while it is read, a metrics write on a
// full disk) first lets a checkpoint save in flight finish, then writes
// summary.json with status "failed", the error's first line, the last step
// completed and the newest complete checkpoint (a summary that cannot be
// written is a warning), and is rethrown unchanged.
//
// What the summary (and each metrics line) adds to the steps' numbers: the
// cost so far and projected (run_cost.h), every rank's peak memory
// (rank_peaks.h: each rank writes its own file into run_dir), and the time
// the steps waited for batches. When the last 10 steps waited for batches
// more than a tenth of their time, a warning names the loader as the
// bottleneck (once, then at most once per 100 steps; each rank about its own
// loader).
//
// Resume: the state of the checkpoint (masters, AdamW state, step, data
// position) replaces the seed's initial one, whatever strategy and number of
// ranks saved it; the run then continues to config.steps exactly as an
// uninterrupted one would (bit for bit on the CPU with the same plan).
// SIGINT/SIGTERM: the ranks agree at the next step boundary, save a
// checkpoint when ckpt_dir is set, write the summary and return
// (summary.stopped_by names the signal).
//
// Several processes: each is one rank of plan.gpus, placed by the torchrun or
// Slurm environment (comm/distributed_env.h); they connect their shard,
// replica and world groups (NCCL on CUDA, Gloo on the CPU), run a health
// check, and train the plan's sharding. "cuda" / "cuda:0" then mean
// cuda:LOCAL_RANK. Rank 0 alone writes the run directory: metrics.jsonl,
// summary.json, and at the end final.safetensors — every parameter in fp32
// under its Hugging Face name and shape (the master shards all-gathered).
// REQUIRES: config.program was built from config.plan (the batch shape,
// groups and units agree, else std::invalid_argument). Throws UserError for
// an invalid plan, a plan this
// executor cannot run (parameter offload), a world size other than
// plan.gpus, no CUDA device when one is asked for, or a bad batch;
// CollectiveError when the ranks cannot connect; std::runtime_error for a
// bad step (a loss or gradient norm not finite or spiking) under
// BadStepAction::kStop.
RunSummary Train(const TrainConfig& config, BatchSource& data);

// Train() on a token file read by the background batch loader (shuffled
// windows seeded with plan.seed; rank r of W reads rows r*micro_batch.. of
// every global micro-batch of W*micro_batch samples; config.loader_workers
// threads, config.loader_prefetch micro-batches ahead). Throws UserError for
// a missing or malformed file, a token id >= vocab, or loader settings out of
// range.
RunSummary TrainOnTokenFile(const TrainConfig& config, const std::string& token_path);

}  // namespace llmplan::executor
