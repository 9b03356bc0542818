// NVMe offload's numbers: what the planner (host memory, disk bytes, step
// time, refusal), the executor's streamed AdamW
// (executor/optimizer/nvme_optimizer_state.h) and the run's preflight check of
// the disk all use, defined once.
//
// One file per rank holds AdamW's m and v for every unit of the rank's shard,
// unit after unit. A unit of n elements is cut into blocks of
// kNvmeBlockElements; block k stores its m then its v, each rounded up to
// kNvmeAlignment bytes, so one block is one contiguous aligned read and one
// aligned write. O_DIRECT needs offsets, lengths and buffer addresses
// aligned to the device's logical block (512 B or 4 KiB); 4 KiB covers both.
//
// Large blocks because an SSD reaches its sequential bandwidth only with
// megabytes in flight; not larger, because the first read and the last write
// of each unit overlap no compute (the pipeline restarts per unit), and the
// host holds kNvmeBuffers of them.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/hardware_profile.h"

namespace llmplan {

inline constexpr int64_t kNvmeAlignment = 4096;
inline constexpr int64_t kNvmeBlockElements = int64_t{1} << 22;  // 4 Mi elements: 32 MiB of m + v
// Pinned blocks per rank: block k+1 being read, k updated, k-1 written back.
inline constexpr int kNvmeBuffers = 3;
// The planner refuses an NVMe plan whose disk time per step (reading and
// writing the state, at the profile's rates shared by the node's ranks) is
// more than this fraction of the step: beyond it the GPUs mostly wait for
// the disk, and a larger gradient accumulation (one pass over the state per
// more tokens), more GPUs (a smaller shard each) or a faster disk is the
// answer, not a run at a fraction of the speed.
inline constexpr double kNvmeMaxStepFraction = 0.5;

// Bytes of one block of `elements` on disk and in a staging buffer: m and v,
// each rounded up to kNvmeAlignment.
int64_t NvmeBlockBytes(int64_t elements);
// Bytes of a unit of `elements` in the file: its blocks, the last one short.
int64_t NvmeUnitBytes(int64_t elements);
// The size of one rank's file for units of `shard_numels` elements.
int64_t NvmeFileBytes(const std::vector<int64_t>& shard_numels);
// Elements of one staging block for units of `shard_numels`: a whole block,
// or the largest unit when every unit is smaller (a small model does not
// pay 96 MiB for state of a few MiB).
int64_t NvmeStagingBlockElements(const std::vector<int64_t>& shard_numels);
// Host bytes one rank stages the stream through: kNvmeBuffers such blocks.
double NvmeStagingBytes(const std::vector<int64_t>& shard_numels);

// Seconds the disk needs for one unit's CPU AdamW of `elements` parameters
// when `sharers` ranks of the node stream at once (they split the disk): the
// whole read and write, in series (one SSD serves both directions from the
// same flash channels; counting them apart would overstate it).
// REQUIRES: profile has nvme rates (HasNvmeRates).
double NvmeStreamSeconds(double elements, int sharers, const HardwareProfile& profile);
// The part of it that overlaps no compute: the unit's first block read
// before the update can start, its last block written after it ends.
double NvmeEdgeSeconds(double elements, int sharers, const HardwareProfile& profile);
bool HasNvmeRates(const HardwareProfile& profile);

}  // namespace llmplan
