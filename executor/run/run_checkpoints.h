// RunCheckpoints: a run's checkpoints in --ckpt-dir — saved after every
// ckpt_every steps, at the end and when stopped, never failing the run: a
// save that cannot be made is a warning, the earlier checkpoints stay intact
// and training goes on. Nothing happens without a checkpoint directory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "executor/checkpoint/sharded_checkpoint.h"
#include "executor/run/rank_setup.h"
#include "executor/run/training_state.h"
#include "executor/run/trainer.h"

namespace llmplan::executor {

class RunCheckpoints {
 public:
  // REQUIRES: PrepareRank has pruned the directory's partial checkpoints.
  RunCheckpoints(const TrainConfig& config, const RankSetup& rank, TrainingState& state);
  RunCheckpoints(const RunCheckpoints&) = delete;
  RunCheckpoints& operator=(const RunCheckpoints&) = delete;

  // Saves the state after `taken` steps with the data position `data_position`
  // (an offloaded optimizer's pending update applied first); nothing when
  // that step is saved already. With `best`, the checkpoint becomes the
  // directory's best (--keep-best): best.json names it once it is complete,
  // before the pruning, so the best it displaces goes unless it is among the
  // newest kept.
  void Save(int64_t taken, int64_t data_position, std::optional<checkpoint::BestCheckpoint> best = std::nullopt);
  // Waits for a save in flight (a warning when it failed) and returns the
  // newest complete checkpoint ("" when there is none or no directory).
  std::string Finish();
  // Host bytes this rank holds for --ckpt-async saves.
  int64_t staging_bytes() const { return writer_ ? writer_->staging_bytes() : 0; }
  // The newest complete checkpoint on disk now (saves may have failed, or
  // still be in flight).
  std::string Newest() const;

 private:
  std::string dir_;
  bool warn_;  // rank 0 prints the warnings
  TrainingState& state_;
  int64_t tokens_per_step_;
  std::unique_ptr<CheckpointWriter> writer_;
};

}  // namespace llmplan::executor
