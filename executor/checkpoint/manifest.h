// CheckpointManifest: what one checkpoint holds, written last into its
// directory (manifest.json) and read first on resume. Layout of a checkpoint
// directory (docs/CHECKPOINTS.md has the whole contract):
//
//   CKPT_DIR/step-00000042/             the state after 42 optimizer steps
//     manifest.json                     this struct
//     plan.json                         the plan that saved it (model spec included)
//     shard-00000-of-00002.safetensors  one file per rank of the first shard group
//     shard-00001-of-00002.safetensors
//
// A unit's state (fp32 master, AdamW m and v) is its flat parameter vector,
// the concatenation of its Hugging Face parameters in order, without the
// sharding's padding. Each shard file holds, for every unit u, the part
// [begin, begin + count) of that vector the rank owned, as 1-D F32 tensors
// named "unit.<u>.master", "unit.<u>.exp_avg" and "unit.<u>.exp_avg_sq" —
// except a unit every rank holds whole (the embedding and head of a plan with
// replicate_edges), which only rank 0's file holds.
// The manifest lists those pieces explicitly, so a loader with any number of
// ranks and any strategy reads the ranges it needs without knowing how the
// saver sharded (reshard on load).
//
// Everything random in a run is a function of the seed and the data
// position (no dropout; initial weights and the sample order are drawn from
// the seed), so those two and the optimizer's step count are the whole of the
// non-tensor state; the learning rate follows from the step.
//
// This header is free of LibTorch: the parser is exposed to outside input and
// fuzzed on its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmplan::checkpoint {

// Version 2 adds the manifest's own checksum ("manifest_checksum": CRC-32C of
// the manifest's compact JSON without that field), so that a changed step or
// data position is refused like a changed shard. Version 1 (no checksum) is
// still read.
inline constexpr int kManifestVersion = 2;
inline constexpr const char* kManifestFormat = "llmplan-checkpoint";
// The state kinds every unit has in the shard files holding it, in this order.
inline constexpr const char* kStateKinds[] = {"master", "exp_avg", "exp_avg_sq"};

// The tensor name of unit `unit`'s state `kind` in a shard file.
std::string ShardTensorName(int unit, const std::string& kind);

struct CheckpointParam {
  std::string name;  // Hugging Face name, e.g. "model.layers.0.mlp.up_proj.weight"
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// Elements [begin, begin + count) of a unit's flat vector, in `file`.
struct CheckpointPiece {
  std::string file;
  int64_t begin = 0;
  int64_t count = 0;
};

struct CheckpointUnit {
  std::string name;  // "embed", "block.3", "head"
  int64_t numel = 0;  // sum of the params' numel
  std::vector<CheckpointParam> params;
  std::vector<CheckpointPiece> pieces;  // ordered, contiguous, covering [0, numel)
};

struct CheckpointFile {
  std::string name;  // relative to the checkpoint directory, no '/'
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Which token file a run trained on, by content: its size and the CRC-32C
// of its first and last MiB (a 100 GB file is identified in milliseconds).
// The data position indexes the sample order of that file; resumed on
// another, it would index other samples. bytes == 0: not recorded.
struct DataIdentity {
  std::string name;  // the file's name when saved (informational)
  uint64_t bytes = 0;
  uint32_t ends_crc32c = 0;
  bool known() const { return bytes > 0; }
  bool SameFileAs(const DataIdentity& other) const { return bytes == other.bytes && ends_crc32c == other.ends_crc32c; }
};

struct CheckpointManifest {
  int64_t step = 0;           // optimizer steps taken
  int64_t data_position = 0;  // global samples consumed
  int64_t tokens_seen = 0;    // step * tokens per step of the plans that ran
  uint64_t seed = 0;
  std::string model_name;
  // How the saver ran (informational: any layout loads into any other).
  int saved_gpus = 1;
  std::string saved_strategy;
  int saved_shard_group_size = 1;
  std::string created_utc;  // ISO 8601
  DataIdentity data;        // the token file trained on (absent in older manifests)
  std::vector<CheckpointUnit> units;
  std::vector<CheckpointFile> files;  // every file but manifest.json
};

nlohmann::json ManifestToJson(const CheckpointManifest& manifest);

// Parses and validates manifest JSON text: format and version, its own
// checksum (version 2), non-negative
// counters, every unit's params summing to its numel, pieces ordered,
// contiguous and covering [0, numel) exactly, every piece's file listed in
// `files`, file names without '/' or "..", no duplicates.
// REQUIRES: nothing. Throws UserError whose one-line message starts with
// `what` (the manifest's path) and names the first problem.
CheckpointManifest ParseManifest(const std::string& text, const std::string& what);

}  // namespace llmplan::checkpoint
