// CheckpointStore: the checkpoint directory (--ckpt-dir) as a list of
// complete checkpoints, and the steps that make a new one appear atomically.
//
//   CKPT_DIR/step-00000040/          complete: renamed into place after its
//   CKPT_DIR/step-00000042/          manifest was written and fsynced
//   CKPT_DIR/step-00000044.partial/  being written (or left by a crash: never
//                                    read, removed by the next save)
//
// A checkpoint becomes visible only by the rename of its ".partial"
// directory, after every file in it and the directory itself were fsynced,
// and the parent is fsynced after the rename: a crash at any moment leaves
// either the new checkpoint whole or none of it, and the previous ones
// untouched. Older checkpoints are removed only after a newer one is
// complete (keep the last K).
//
// The directory must be one that every rank sees (a local disk on one node; a
// shared file system across nodes), as for torch.distributed.checkpoint.
// Not thread-safe: one writer (rank 0) commits and prunes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/checkpoint/manifest.h"

namespace llmplan::checkpoint {

// "step-00000042".
std::string CheckpointName(int64_t step);

// The checkpoint of the lowest evaluation loss (llmplan run --keep-best),
// recorded as CKPT_DIR/best.json {"step", "eval_loss", "checkpoint"}.
struct BestCheckpoint {
  int64_t step = 0;
  double eval_loss = 0;
};

class CheckpointStore {
 public:
  // REQUIRES: nothing (the directory is created by Begin).
  explicit CheckpointStore(std::string dir);

  const std::string& dir() const { return dir_; }

  // Steps of the complete checkpoints, ascending: directories named
  // step-NNNNNNNN whose manifest.json reads and holds that step. A step-N
  // directory that is not one is skipped with a warning on stderr (once per
  // process); anything else in the directory is ignored.
  std::vector<int64_t> CompleteSteps() const;
  // The newest complete checkpoint's directory, if any.
  std::optional<std::string> Newest() const;
  std::string PathOf(int64_t step) const;

  // Creates CKPT_DIR/step-N.partial, empty (a stale one from a crash is
  // removed first), and returns its path. Throws UserError when it cannot.
  std::string Begin(int64_t step) const;
  // Writes `manifest` into the partial directory, fsyncs every file and the
  // directory, renames it to step-N (replacing a complete step-N, as a re-run
  // of the same step after a resume does), and fsyncs CKPT_DIR. Returns the
  // final path. Throws UserError when any of it fails; the partial directory
  // is then removed and the complete checkpoints are as they were.
  std::string Commit(int64_t step, const CheckpointManifest& manifest) const;
  // Removes the partial directory of `step` (a failed save).
  void Abandon(int64_t step) const;
  // Keeps the newest `keep` complete checkpoints — and the best one, when
  // best.json names one — and removes older ones and stale partial
  // directories other than `except_partial_step`'s.
  // REQUIRES: keep >= 1.
  void Prune(int keep, int64_t except_partial_step = -1) const;
  // best.json's checkpoint, if the file is there and reads (a damaged one
  // is ignored, with a warning).
  std::optional<BestCheckpoint> Best() const;
  // Writes best.json (atomically) naming step `best.step`'s checkpoint, or
  // removes it (nullopt). Throws UserError when it cannot be written.
  void SetBest(const std::optional<BestCheckpoint>& best) const;

  // Removes the partial directories a crash left; complete checkpoints stay
  // (a run may be about to resume from an old one).
  void RemovePartials() const;

 private:
  void RemovePartialsExcept(int64_t except_partial_step) const;

  std::string dir_;
};

// The identity of the token file at `path` (DataIdentity in manifest.h).
// Throws UserError when it cannot be read.
DataIdentity IdentifyDataFile(const std::string& path);

// Reads and validates CHECKPOINT/manifest.json (its own checksum included),
// and checks that a directory named step-N holds step N. Throws UserError.
CheckpointManifest ReadManifest(const std::string& checkpoint_dir);

// Checks that every file the manifest lists exists at its size, and that
// each of `files` (all of them when empty) has the CRC-32C it records.
// Throws UserError naming the first damaged or missing file and what to do.
void VerifyCheckpointFiles(const std::string& checkpoint_dir, const CheckpointManifest& manifest,
                           const std::vector<std::string>& files = {});

}  // namespace llmplan::checkpoint
