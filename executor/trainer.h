// Trainer: the training loop of `llmplan run`, reading top to bottom in one
// place (trainer.cc's Train): build the model from the plan, its flat units,
// the optimizer, the step program and its interpreter; then for each step take
// grad_accum micro-batches, run the step (forward, backward, clip, AdamW) and
// log metrics.
//
// Everything that decides what the run computes is explicit and plain data:
// the seed (plan.seed: initial weights), the data position (the BatchSource's
// sample count) and the optimizer state (AdamWState, with its step count), so
// a checkpoint can capture and restore a run exactly.
//
// This header is free of LibTorch so the CLI compiles quickly.
#pragma once

#include <cstdint>
#include <string>

#include "executor/metrics.h"
#include "planner/plan.h"

namespace llmplan::executor {

class BatchSource;

struct TrainConfig {
  Plan plan;
  int64_t steps = 0;
  std::string run_dir;          // metrics.jsonl, summary.json, ...; empty: write nothing
  std::string device = "cuda";  // "cpu", "cuda" or "cuda:N"
  bool progress = true;         // print a line per step and the summary
};

// Trains config.plan for config.steps optimizer steps on micro-batches from
// `data`. Returns the summary (also written to run_dir/summary.json).
// REQUIRES: nothing. Throws UserError for an invalid plan, a plan this
// executor cannot run (several GPUs, offload), no CUDA device when one is
// asked for, or a bad batch; std::runtime_error when the loss stops being
// finite.
RunSummary Train(const TrainConfig& config, BatchSource& data);

// Train() on a token file read by the background batch loader (shuffled
// windows seeded with plan.seed). Throws UserError for a missing or malformed
// file or a token id >= vocab.
RunSummary TrainOnTokenFile(const TrainConfig& config, const std::string& token_path);

}  // namespace llmplan::executor
