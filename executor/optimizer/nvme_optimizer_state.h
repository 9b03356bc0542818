// NvmeOptimizerState: AdamW's m and v for one rank's units in one file on a
// local SSD (ZeRO-Infinity's NVMe offload), and the CPU AdamW that streams
// them. Host memory then holds kNvmeBuffers blocks (96 MiB), not the state
// (8 bytes per parameter of the shard: 8 GiB for a 1B model on one GPU).
// The layout and the block size are planner/nvme_offload.h's.
//
// Update streams a unit through the three blocks: while the cores update
// block k (CpuAdamW, the same loop as the in-memory offload, so the results
// are bit-identical), one thread reads block k+1 and another writes block
// k-1 back. The disk and the cores overlap; a unit takes the longer of the
// two plus its first read and last write (what planner/cost_model.cc
// charges).
//
// The file is scratch, not a checkpoint: it is unlinked as soon as it is
// reserved, so its space returns to the disk when the process ends however
// it ends. Checkpoints copy the state out of it (Read) and resume puts it
// back (Write).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor/hardware/direct_file.h"
#include "executor/optimizer/adamw_math.h"

namespace llmplan::executor {

// The file rank `rank` of this process keeps its state in under `dir`
// ("llmplan-adamw-rank00003-pid4242.bin": runs sharing the directory never
// meet).
std::string NvmeStatePath(const std::string& dir, int rank);

class NvmeOptimizerState {
 public:
  // Creates the file `path` for units of `shard_numels` elements, m and v
  // all zero (a fresh optimizer), reserving its NvmeFileBytes on the disk.
  // `try_direct` false: buffered even where O_DIRECT works (what a
  // filesystem without it gets).
  // REQUIRES: shard_numels[u] >= 0. Throws UserError when the directory is
  // missing or unwritable, or the disk lacks the space.
  NvmeOptimizerState(const std::string& path, std::vector<int64_t> shard_numels, bool try_direct = true);
  NvmeOptimizerState(const NvmeOptimizerState&) = delete;
  NvmeOptimizerState& operator=(const NvmeOptimizerState&) = delete;

  const std::string& path() const { return file_.path(); }
  bool direct() const { return file_.direct(); }  // false: the filesystem refused O_DIRECT
  int64_t file_bytes() const { return file_bytes_; }
  int units() const { return static_cast<int>(shard_numels_.size()); }
  int64_t shard_numel(int unit) const { return shard_numels_.at(unit); }

  // One AdamW step of unit `unit` (CpuAdamW's contract): param and grad hold
  // shard_numel(unit) host floats; compute_out, when not null, as many bf16
  // (compute_is_bf16) or fp32 values. `threads` as CpuAdamW's.
  // Throws UserError on an I/O error (the unit's state is then undefined).
  void Update(int unit, float* param, const float* grad, void* compute_out, bool compute_is_bf16,
              const AdamWScalars& s, int threads);

  // Elements [0, count) of the unit's m and v copied into `m` and `v`.
  // REQUIRES: 0 <= count <= shard_numel(unit).
  void Read(int unit, int64_t count, float* m, float* v);
  // Sets the unit's m and v: elements [0, count) from `m` and `v`, the rest
  // (padding) zero.
  // REQUIRES: 0 <= count <= shard_numel(unit).
  void Write(int unit, int64_t count, const float* m, const float* v);

 private:
  // Block k of `unit`: its elements, where it starts in the file, and where
  // v starts inside it (m and v are each aligned).
  struct Block {
    int64_t first = 0, elements = 0, offset = 0, bytes = 0, v_index = 0;
  };
  Block BlockOf(int unit, int64_t k) const;
  int64_t Blocks(int unit) const;

  std::vector<int64_t> shard_numels_;
  std::vector<int64_t> unit_offsets_;  // where each unit starts in the file
  int64_t file_bytes_ = 0;
  DirectFile file_;
  std::vector<AlignedBuffer> buffers_;  // kNvmeBuffers blocks
};

}  // namespace llmplan::executor
