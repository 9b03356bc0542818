// RankPeaks: every rank's peak memory, for the run's summary — not rank 0's
// alone: the ranks run one program, but their allocators fragment
// differently and a device may be shared with another process, so the rank
// closest to running out need not be rank 0.
//
// Each rank writes RUN_DIR/rank-N.peak_memory.json (through AtomicFile) after
// a step that raised its peak — in practice the first few steps — and before
// the step's stop vote, so once rank 0 has passed the last step's vote every
// rank's file holds its final peak. Rank 0 reads them all at the end.
//
// Why files and not the communicator: a gather at the end of the run works
// only when every rank reaches the end. When a rank dies, a collective that
// includes it fails or times out, and the peaks of the rank that failed —
// often the one a user most wants to see, since running out of memory is a
// common way to fail — would be lost with it. A file is on disk from the
// step that set the peak on, needs nothing from the other ranks to be read,
// and costs no time in the step (a few writes per run, none once the peaks
// stop growing). The cost: on several nodes the ranks of other nodes are
// read only when --out is on a file system they share with rank 0 (as
// --ckpt-dir must be); the summary lists the ranks it did not find.
//
// This header is free of LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmplan::executor {

struct RankPeak {
  int rank = 0;
  int64_t step = 0;  // the optimizer step in which the peak was reached (from 1)
  int64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  std::string memory_source;  // as StepMeasurement's
  std::string host;           // the node the rank ran on
};

struct RankPeaks {
  std::vector<RankPeak> ranks;  // those found, by rank
  std::vector<int> missing;     // ranks of the world with no (readable) file
  // Over the ranks found, by peak reserved bytes (what the device must hold;
  // allocated where no rank reserved anything): the highest and lowest.
  int max_rank = -1, min_rank = -1;
  double max_over_min = 0;  // 0 when no rank was found or the lowest is 0
};

// "rank-3.peak_memory.json".
std::string RankPeakFileName(int rank);
// True for the names RankPeakFileName gives.
bool IsRankPeakFile(const std::string& name);

// Writes `peak` to run_dir/RankPeakFileName(peak.rank), atomically.
// REQUIRES: run_dir exists. Throws UserError when the file cannot be written.
void WriteRankPeak(const std::string& run_dir, const RankPeak& peak, int world);

// Reads the files of ranks 0..world-1 (one written for another world size
// counts as missing) and finds the imbalance. Never throws for a missing or
// damaged file: that rank is listed in `missing`.
RankPeaks ReadRankPeaks(const std::string& run_dir, int world);

// This machine's host name ("" if unknown).
std::string HostName();

// Adds the summary's fields: rank_peaks (a list of {rank, step,
// peak_allocated_bytes, peak_reserved_bytes, host}), ranks_without_peaks,
// and peak_imbalance {max_rank, min_rank, max_over_min} (null when no rank
// was found).
void AddRankPeaksJson(const RankPeaks& peaks, nlohmann::json& j);

// For the summary: "peak by rank: highest rank 1 (1.23 GiB reserved), lowest
// rank 0 (1.20 GiB), max/min 1.02" and "; no peak from ranks 2, 3" when some
// are missing; "" when no rank was found or the run had one rank.
std::string RankPeaksText(const RankPeaks& peaks);

}  // namespace llmplan::executor
