// safetensors: Hugging Face's tensor file format, so weights trained here open
// in transformers / vLLM and published weights can start a run here.
//
//   8 bytes    little-endian u64 N, the header length
//   N bytes    UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [b, e]},
//              "__metadata__": {str: str}}, padded with spaces so the data
//              starts 8-byte aligned; offsets are relative to the data section
//   data       each tensor little-endian, row-major, back to back, no gaps
//
// The writer orders tensors by name and writes to a temporary file that is
// renamed over the target only when complete, so a crash never leaves a
// half-written checkpoint under the final name. The reader maps the file and
// validates the whole header before handing out any tensor
// (safetensors_header.h, free of LibTorch: header under 100 MB, known dtypes,
// non-negative shapes whose byte size equals the span, offsets in range,
// non-overlapping and gap-free, no duplicate names). Every problem is a
// UserError with one line naming the file.
//
// dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL map one to one onto torch
// dtypes. U16 and U32 (token ids, not weights) have no torch dtype in
// LibTorch 1.13: the reader widens them to int32 / int64; the writer never
// produces them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/checkpoint/crc32c.h"
#include "executor/checkpoint/safetensors_header.h"

namespace llmplan::checkpoint {

// Writes `tensors` (ordered by name) and `metadata` to `path`, fsynced, and
// returns the file's size and CRC-32C (computed as it is written).
// REQUIRES: every tensor is on the CPU (non-contiguous ones are made
// contiguous) with a dtype listed above; no name is "__metadata__" or empty.
// Throws std::invalid_argument for a violated REQUIRES and UserError when the
// file cannot be written (the target is then left as it was).
// `what` names the file in a write error ("final weights", "exported weights").
FileDigest WriteSafetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                            const std::map<std::string, std::string>& metadata = {},
                            const std::string& what = "checkpoint shard");

// A safetensors file opened for reading: the header is validated on open and
// tensors are copied out of the mapping one at a time, so a 16 GB checkpoint
// can be loaded unit by unit without holding it twice.
class SafetensorsReader {
 public:
  // REQUIRES: nothing. Throws UserError for a missing, truncated or invalid file.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();

  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Entries ordered by name.
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  bool Contains(const std::string& name) const { return entries_.count(name) != 0; }

  // A new contiguous CPU tensor holding `name` (U16/U32 widened, see above).
  // REQUIRES: nothing. Throws UserError when `name` is absent.
  at::Tensor Read(const std::string& name) const;
  // Elements [first, first + count) of the 1-D F32 tensor `name`, as a new
  // CPU tensor: how a resharded load reads only the part of a saved shard
  // that falls in its own.
  // REQUIRES: nothing. Throws UserError when `name` is absent, not 1-D F32,
  // or the range is outside it.
  at::Tensor ReadRange(const std::string& name, int64_t first, int64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  const unsigned char* map_ = nullptr;
  uint64_t file_bytes_ = 0;
  uint64_t data_offset_ = 0;  // 8 + N
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsEntry> entries_;
};

// Every tensor and the metadata of `path`, ordered by name.
struct SafetensorsContents {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};
// REQUIRES: nothing. Throws UserError as SafetensorsReader does.
SafetensorsContents ReadSafetensors(const std::string& path);

// Sharded checkpoints (how HF publishes models over ~5 GB):
// model-0000k-of-0000n.safetensors files plus model.safetensors.index.json
// {"metadata": {"total_size": ...}, "weight_map": {tensor name: shard file}}.
// Returns tensor name -> shard path, resolved against the index's directory.
// REQUIRES: nothing. Throws UserError for a missing or malformed index, or a
// shard file it names that does not exist.
std::map<std::string, std::string> ReadSafetensorsIndex(const std::string& index_path);

}  // namespace llmplan::checkpoint
