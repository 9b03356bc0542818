#include "executor/doctor/gpu_islands.h"

#include <algorithm>
#include <numeric>

namespace llmplan::executor {

GpuIslands FindGpuIslands(int gpus, const std::vector<PeerLink>& links) {
  double fastest = 0;
  for (const PeerLink& l : links)
    if (l.error.empty() && l.peer_access) fastest = std::max(fastest, l.BytesPerSecond());
  // Union-find over the fast pairs.
  std::vector<int> root(static_cast<size_t>(gpus));
  std::iota(root.begin(), root.end(), 0);
  auto find = [&](int g) {
    while (root[g] != g) g = root[g] = root[root[g]];
    return g;
  };
  auto valid = [&](const PeerLink& l) { return l.a >= 0 && l.b >= 0 && l.a < gpus && l.b < gpus && l.a != l.b; };
  for (const PeerLink& l : links)
    if (valid(l) && l.error.empty() && l.peer_access && fastest > 0 && l.BytesPerSecond() >= kIslandLinkFraction * fastest)
      root[find(l.a)] = find(l.b);
  GpuIslands out;
  std::vector<int> island_of(static_cast<size_t>(gpus), -1);
  for (int g = 0; g < gpus; ++g) {
    const int r = find(g);
    if (island_of[r] < 0) {
      island_of[r] = static_cast<int>(out.islands.size());
      out.islands.emplace_back();
    }
    out.islands[island_of[r]].push_back(g);
  }
  for (const PeerLink& l : links) {
    if (!valid(l) || find(l.a) == find(l.b) || !l.error.empty() || !(l.BytesPerSecond() > 0)) continue;
    out.cross_island_bytes_per_s = out.cross_island_bytes_per_s == 0
                                       ? l.BytesPerSecond()
                                       : std::min(out.cross_island_bytes_per_s, l.BytesPerSecond());
  }
  return out;
}

}  // namespace llmplan::executor
