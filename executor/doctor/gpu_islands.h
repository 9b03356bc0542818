// FindGpuIslands: which GPUs of a node share a fast link, from each pair's
// measured link (peer_links.h) — the profile's topology.islands. A box of two
// 4-GPU NVLink islands joined through PCIe (or across CPU sockets) moves
// ~400 GB/s inside an island and ~25 GB/s between them: a collective over
// all eight runs at the slow link's pace, so the planner keeps shard groups
// inside an island where it can. No CUDA.
#pragma once

#include <vector>

#include "executor/doctor/peer_links.h"

namespace llmplan::executor {

struct GpuIslands {
  std::vector<std::vector<int>> islands;  // local GPU indices, ascending; the islands by their first GPU
  double cross_island_bytes_per_s = 0;    // the slowest pair between islands (0 with one island)
};

// Two GPUs share an island when their pair has peer access and at least
// this fraction of the fastest pair's bandwidth; islands are what those
// pairs join. Every pair alike (an NVLink switch, or a PCIe-only box) is
// one island: the node's intra-node curves then hold for any group.
constexpr double kIslandLinkFraction = 0.5;

// REQUIRES: gpus >= 1; links name pairs of [0, gpus) (a pair missing, or one
// whose copy failed, joins nothing).
GpuIslands FindGpuIslands(int gpus, const std::vector<PeerLink>& links);

}  // namespace llmplan::executor
