// Saving and loading the training state of sharded units: each rank of the
// first shard group writes the part of every unit it owns (master, AdamW m
// and v), rank 0 writes the manifest and commits; any number of ranks with
// any strategy loads it back, each reading only the ranges of its own shard
// (the layout is in manifest.h, the atomic commit in checkpoint_store.h).
//
// Why no collectives: every rank already holds exactly what it must write,
// and the ranks of other shard groups (hybrid_shard replicas) hold copies.
// Ranks tell rank 0 they are done by a small digest file beside their shard
// (size and CRC-32C, or the error that stopped them); rank 0 waits for all of
// them, so a save can run on a background thread while the communicators
// carry the next step's collectives.
//
// Asynchronous saves (CheckpointOptions::async): the state is first copied
// into host buffers that are allocated once (pinned on a GPU machine: one
// DMA at HBM-to-host speed, ~1 s for 48 GB), then written by a background
// thread while training goes on. At most one save is in flight: the next one
// waits for it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/checkpoint/checkpoint_store.h"
#include "executor/checkpoint/manifest.h"
#include "executor/checkpoint/safetensors.h"
#include "executor/sharding/flat_unit.h"
#include "executor/model/llama_model.h"
#include "executor/optimizer/adamw.h"
#include "planner/plan.h"

namespace llmplan::executor {

struct CheckpointOptions {
  std::string dir;      // --ckpt-dir; empty: no checkpoints
  int64_t every = 0;    // save after every `every` steps (0: only when stopped by a signal, and at the end)
  int keep = 2;         // complete checkpoints kept
  bool async = false;   // write in the background (see above)
  checkpoint::DataIdentity data;  // the token file, recorded in each manifest
  // How long rank 0 waits for the other writers' digests.
  std::chrono::seconds wait_for_ranks{1800};
};

// The non-tensor state that goes with a save.
struct TrainingProgress {
  int64_t step = 0;           // optimizer steps taken
  int64_t data_position = 0;  // global samples consumed
  int64_t tokens_seen = 0;
  // Set: this checkpoint becomes the directory's best (--keep-best). The
  // committer writes best.json once the checkpoint is complete and before
  // pruning, so the pruning keeps it and lets the best it displaces go.
  std::optional<checkpoint::BestCheckpoint> best;
};

// The unit names checkpoints and messages use: "embed", "block.N", "head".
std::string UnitName(const LlamaModel& model, int unit);

class CheckpointWriter {
 public:
  // `rank`: this process in the job; the writers are the ranks of the first
  // shard group (rank < plan.shard_group_size), the committer rank 0.
  // REQUIRES: options.dir non-empty; options.keep >= 1; `model` outlives this;
  // no partial directory of a step this run will save exists (rank 0 prunes
  // the store before the ranks' first collective: CheckpointStore::RemovePartials).
  CheckpointWriter(const Plan& plan, const LlamaModel& model, int rank, CheckpointOptions options);
  ~CheckpointWriter();  // waits for a save in flight
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  const CheckpointOptions& options() const { return options_; }

  // Saves the state after `progress.step` steps: waits for the save in
  // flight, copies this rank's shards (to host buffers when async), and
  // writes them now (sync) or on the background thread (async). Returns the
  // error of the previous save ("" when it succeeded or there was none).
  // A save that fails leaves the earlier checkpoints intact; its error is
  // returned by the next Save or Wait, never thrown: training goes on.
  // REQUIRES: units and state are this rank's, as trained by the plan.
  std::string Save(std::vector<FlatUnit>& units, const AdamWState& state, const TrainingProgress& progress);
  // Waits for the save in flight; returns its error ("" when it succeeded).
  std::string Wait();
  // The step of the last save started (-1: none).
  int64_t last_saved_step() const { return last_step_; }
  // Host bytes this rank holds for asynchronous saves: the snapshot buffers,
  // allocated by the first Save and kept for the run (fp32 master, m and v:
  // 12 bytes per element of the rank's shard, as
  // CheckpointStagingBytesPerRank in planner/memory_model.h predicts).
  // 0 for synchronous saves, a replica rank, or before the first Save.
  int64_t staging_bytes() const;

 private:
  struct Snapshot;
  void Write(const Snapshot& snapshot, const TrainingProgress& progress);  // the writer's whole job
  checkpoint::CheckpointManifest Manifest(const TrainingProgress& progress) const;

  Plan plan_;
  const LlamaModel& model_;
  int rank_;
  bool writer_, committer_;
  CheckpointOptions options_;
  checkpoint::CheckpointStore store_;
  std::unique_ptr<Snapshot> snapshot_;  // reused buffers (async)
  std::thread thread_;
  std::string error_;  // of the save in flight, read after join
  int64_t last_step_ = -1;
};

// A complete checkpoint opened for loading: the manifest validated against
// the model, the shard files this rank reads checked against their sizes and
// CRC-32C before a byte is used.
class CheckpointReader {
 public:
  // REQUIRES: nothing. Throws UserError for a missing, damaged or
  // incompatible checkpoint (another model: the message names the unit).
  CheckpointReader(const std::string& checkpoint_dir, const LlamaModel& model);

  const std::string& path() const { return dir_; }
  const checkpoint::CheckpointManifest& manifest() const { return manifest_; }

  // Verifies (size, CRC-32C) the files rank `shard_rank` of a shard group of
  // `plan` reads: those holding a part of its shard of some unit (each unit
  // sharded over Plan::UnitShardGroup). Throws UserError on damage.
  // REQUIRES: plan is for the checkpoint's model.
  void VerifyFilesFor(const Plan& plan, int64_t shard_rank);

  // Elements [begin, begin + count) of unit `unit`'s state `kind` ("master",
  // "exp_avg", "exp_avg_sq"), fp32 on the host, from whichever pieces hold them.
  at::Tensor Read(int unit, const std::string& kind, int64_t begin, int64_t count);

  // AdamW's m and v for this rank's units, and the step count.
  void RestoreOptimizer(std::vector<FlatUnit>& units, AdamWState& state);

 private:
  const checkpoint::SafetensorsReader& File(const std::string& name);

  std::string dir_;
  checkpoint::CheckpointManifest manifest_;
  std::map<std::string, std::unique_ptr<checkpoint::SafetensorsReader>> files_;
};

}  // namespace llmplan::executor
