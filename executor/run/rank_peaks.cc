#include "executor/run/rank_peaks.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/format.h"

namespace llmplan::executor {

namespace {

constexpr const char* kPrefix = "rank-";
constexpr const char* kSuffix = ".peak_memory.json";

}  // namespace

std::string RankPeakFileName(int rank) { return kPrefix + std::to_string(rank) + kSuffix; }

bool IsRankPeakFile(const std::string& name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  for (size_t i = prefix.size(); i < name.size() - suffix.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

std::string HostName() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

void WriteRankPeak(const std::string& run_dir, const RankPeak& peak, int world) {
  const nlohmann::json j = {{"rank", peak.rank},
                            {"world", world},
                            {"step", peak.step},
                            {"peak_allocated_bytes", peak.peak_allocated_bytes},
                            {"peak_reserved_bytes", peak.peak_reserved_bytes},
                            {"memory_source", peak.memory_source},
                            {"host", peak.host}};
  WriteFileAtomically((std::filesystem::path(run_dir) / RankPeakFileName(peak.rank)).string(), j.dump() + "\n",
                      "rank peak memory");
}

RankPeaks ReadRankPeaks(const std::string& run_dir, int world) {
  RankPeaks out;
  for (int r = 0; r < world; ++r) {
    std::ifstream in(std::filesystem::path(run_dir) / RankPeakFileName(r));
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
    const auto integer = [&](const char* key) { return j.contains(key) && j[key].is_number_integer(); };
    if (!in || j.is_discarded() || !j.is_object() || !integer("world") || j["world"].get<int>() != world ||
        !integer("step") || !integer("peak_allocated_bytes") || !integer("peak_reserved_bytes")) {
      out.missing.push_back(r);
      continue;
    }
    RankPeak p;
    p.rank = r;
    p.step = j["step"].get<int64_t>();
    p.peak_allocated_bytes = j["peak_allocated_bytes"].get<int64_t>();
    p.peak_reserved_bytes = j["peak_reserved_bytes"].get<int64_t>();
    if (j.contains("memory_source") && j["memory_source"].is_string()) p.memory_source = j["memory_source"];
    if (j.contains("host") && j["host"].is_string()) p.host = j["host"];
    out.ranks.push_back(p);
  }
  bool any_reserved = false;
  for (const RankPeak& p : out.ranks) any_reserved = any_reserved || p.peak_reserved_bytes > 0;
  const auto bytes = [&](const RankPeak& p) { return any_reserved ? p.peak_reserved_bytes : p.peak_allocated_bytes; };
  const RankPeak* high = nullptr;
  const RankPeak* low = nullptr;
  for (const RankPeak& p : out.ranks) {
    if (high == nullptr || bytes(p) > bytes(*high)) high = &p;
    if (low == nullptr || bytes(p) < bytes(*low)) low = &p;
  }
  if (high != nullptr) {
    out.max_rank = high->rank;
    out.min_rank = low->rank;
    out.max_over_min = bytes(*low) > 0 ? static_cast<double>(bytes(*high)) / static_cast<double>(bytes(*low)) : 0;
  }
  return out;
}

void AddRankPeaksJson(const RankPeaks& peaks, nlohmann::json& j) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankPeak& p : peaks.ranks)
    ranks.push_back({{"rank", p.rank},
                     {"step", p.step},
                     {"peak_allocated_bytes", p.peak_allocated_bytes},
                     {"peak_reserved_bytes", p.peak_reserved_bytes},
                     {"host", p.host}});
  j["rank_peaks"] = ranks;
  j["ranks_without_peaks"] = peaks.missing;
  j["peak_imbalance"] = peaks.max_rank < 0 ? nlohmann::json(nullptr)
                                           : nlohmann::json{{"max_rank", peaks.max_rank},
                                                            {"min_rank", peaks.min_rank},
                                                            {"max_over_min", peaks.max_over_min}};
}

std::string RankPeaksText(const RankPeaks& peaks) {
  if (peaks.max_rank < 0 || peaks.ranks.size() + peaks.missing.size() < 2) return "";
  bool reserved = false;
  for (const RankPeak& p : peaks.ranks) reserved = reserved || p.peak_reserved_bytes > 0;
  const auto bytes = [&](int rank) {
    for (const RankPeak& p : peaks.ranks)
      if (p.rank == rank) return static_cast<double>(reserved ? p.peak_reserved_bytes : p.peak_allocated_bytes);
    return 0.0;
  };
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3f", peaks.max_over_min);
  std::string text = "peak by rank: highest rank " + std::to_string(peaks.max_rank) + " (" +
                     FormatBytes(bytes(peaks.max_rank)) + (reserved ? " reserved" : " allocated") + "), lowest rank " +
                     std::to_string(peaks.min_rank) + " (" + FormatBytes(bytes(peaks.min_rank)) + "), max/min " + ratio;
  if (!peaks.missing.empty()) {
    text += "; no peak from rank" + std::string(peaks.missing.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < peaks.missing.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(peaks.missing[i]);
  }
  return text;
}

}  // namespace llmplan::executor
