#include "planner/hardware_profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/json_read.h"
#include "base/user_error.h"

#ifndef LLMPLAN_SOURCE_PROFILES_DIR
#define LLMPLAN_SOURCE_PROFILES_DIR "profiles"
#endif

namespace llmplan {

std::string CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllReduce: return "all_reduce";
  }
  return "?";
}

const CollectiveCurve& LinkCollectives::For(CollectiveOp op) const {
  switch (op) {
    case CollectiveOp::kAllGather: return all_gather;
    case CollectiveOp::kReduceScatter: return reduce_scatter;
    case CollectiveOp::kAllReduce: return all_reduce;
  }
  return all_reduce;
}

namespace {

// Fraction of the full buffer each rank sends in a ring algorithm.
double RingTrafficFactor(CollectiveOp op, int n) {
  double f = static_cast<double>(n - 1) / n;
  return op == CollectiveOp::kAllReduce ? 2.0 * f : f;
}

// Bus bandwidth (NCCL's definition: bytes * traffic factor / time) of the
// curve at `bytes`, interpolated linearly in log(bytes) between measured points
// and held constant outside them.
double BusBandwidth(const CollectiveCurve& c, CollectiveOp op, double bytes) {
  const auto& pts = c.points;
  double f = RingTrafficFactor(op, c.measured_group_size);
  auto bw = [&](size_t i) { return pts[i].first * f / pts[i].second; };
  if (bytes <= pts.front().first) return bw(0);
  if (bytes >= pts.back().first) return bw(pts.size() - 1);
  size_t hi = 1;
  while (pts[hi].first < bytes) ++hi;
  double x0 = std::log(pts[hi - 1].first), x1 = std::log(pts[hi].first);
  double t = (std::log(bytes) - x0) / (x1 - x0);
  return bw(hi - 1) * (1 - t) + bw(hi) * t;
}

}  // namespace

bool HardwareProfile::SpansIslands(const std::vector<int>& local) const {
  if (islands.empty() || local.empty()) return false;
  auto island_of = [&](int gpu) {
    for (size_t i = 0; i < islands.size(); ++i)
      if (std::find(islands[i].begin(), islands[i].end(), gpu) != islands[i].end()) return static_cast<int>(i);
    return -1;
  };
  const int first = island_of(local.front());
  for (int gpu : local)
    if (island_of(gpu) != first) return true;
  return false;
}

double HardwareProfile::CollectiveSeconds(CollectiveOp op, double bytes, int group_size, bool spans_nodes,
                                          bool spans_islands) const {
  if (group_size <= 1 || bytes <= 0) return 0.0;
  if (spans_islands && !spans_nodes && cross_island_bytes_per_s > 0) {
    // A ring over both islands passes each byte of its traffic through the
    // slow link once per direction it is laid: the link, not NVLink, paces it.
    const double across = bytes * RingTrafficFactor(op, group_size) / cross_island_bytes_per_s;
    return std::max(across, CollectiveSeconds(op, bytes, group_size, false, false));
  }
  const CollectiveCurve& c = (spans_nodes ? inter_node : intra_node).For(op);
  // Small messages are latency bound: the smallest measured point's time is the
  // floor at the measured group size; each extra hop adds hop latency.
  double seconds = bytes * RingTrafficFactor(op, group_size) / BusBandwidth(c, op, bytes);
  double floor = c.points.front().second + c.hop_latency_s * std::max(0, group_size - c.measured_group_size);
  if (op == CollectiveOp::kAllReduce) floor += c.hop_latency_s * std::max(0, group_size - c.measured_group_size);
  return std::max(seconds, floor);
}

double HardwareProfile::GemmFlopsPerSecond(double m, double n, double k) const {
  double d = std::max(1.0, std::min({m, n, k}));
  return bf16_peak_flops * gemm_max_efficiency * d / (d + gemm_half_efficiency_dim);
}

double HardwareProfile::AllocatorCapacityBytes() const {
  return memory_bytes * usable_fraction - cuda_context_bytes;
}

double HardwareProfile::AttentionFlopsPerSecond(bool backward, int head_dim, double seq) const {
  double rate = backward ? attention_backward_flops_per_s : attention_forward_flops_per_s;
  for (const AttentionWidth& w : attention_widths)
    if (w.head_dim == head_dim) rate *= backward ? w.backward_fraction : w.forward_fraction;
  const double half = backward ? attention_backward_half_rate_seq : attention_forward_half_rate_seq;
  if (seq > 0 && half > 0 && attention_reference_seq > 0) {
    const double reference = attention_reference_seq;
    rate *= (seq / (seq + half)) / (reference / (reference + half));
  }
  return rate;
}

void HardwareProfile::Validate() const {
  auto positive = [&](double v, const char* field) {
    if (!(v > 0) || !std::isfinite(v))
      throw UserError("profile " + name + ": " + field + " must be a positive number");
  };
  positive(memory_bytes, "memory.capacity_bytes");
  positive(bf16_peak_flops, "compute.bf16_peak_flops");
  positive(attention_forward_flops_per_s, "compute.attention.forward_flops_per_s");
  positive(attention_backward_flops_per_s, "compute.attention.backward_flops_per_s");
  positive(memory_bandwidth_bytes_per_s, "compute.memory_bandwidth_bytes_per_s");
  positive(host_memory_bytes, "host.memory_bytes_per_gpu");
  positive(host_to_device_bytes_per_s, "host.host_to_device_bytes_per_s");
  positive(device_to_host_bytes_per_s, "host.device_to_host_bytes_per_s");
  positive(cpu_adam_params_per_s, "host.cpu_adam_params_per_s");
  positive(cpu_adam_alone_params_per_s, "host.cpu_adam_alone_params_per_s");
  if (!(cpu_adam_slowdown_during_copies >= 0 && cpu_adam_slowdown_during_copies <= 10))
    throw UserError("profile " + name + ": host.cpu_adam_slowdown_during_copies must be between 0 and 10");
  if (!(copy_slowdown_during_cpu_adam >= 0 && copy_slowdown_during_cpu_adam <= 10))
    throw UserError("profile " + name + ": host.copy_slowdown_during_cpu_adam must be between 0 and 10");
  if (AllocatorCapacityBytes() <= 0)
    throw UserError("profile " + name + ": cuda_context_bytes leaves no usable device memory");
  if (gpus_per_node < 1) throw UserError("profile " + name + ": topology.gpus_per_node must be at least 1");
  for (const auto& [variable, value] : nccl_settings) {
    static const char* const kTunable[] = {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"};
    if (std::find(std::begin(kTunable), std::end(kTunable), variable) == std::end(kTunable))
      throw UserError("profile " + name + ": collectives.nccl.settings may set NCCL_ALGO, NCCL_PROTO, "
                      "NCCL_MIN_NCHANNELS or NCCL_MAX_NCHANNELS, not " + variable);
    if (value.empty() || value.find_first_of(" \t\n;") != std::string::npos)
      throw UserError("profile " + name + ": collectives.nccl.settings." + variable + " must be one word, not '" +
                      value + "'");
  }
  if (!islands.empty()) {
    std::vector<int> seen(static_cast<size_t>(gpus_per_node), 0);
    for (const auto& island : islands)
      for (int gpu : island) {
        if (gpu < 0 || gpu >= gpus_per_node || seen[static_cast<size_t>(gpu)]++)
          throw UserError("profile " + name + ": topology.islands must name each of the node's " +
                          std::to_string(gpus_per_node) + " GPUs (0 to " + std::to_string(gpus_per_node - 1) +
                          ") exactly once");
      }
    if (std::find(seen.begin(), seen.end(), 0) != seen.end())
      throw UserError("profile " + name + ": topology.islands must name each of the node's " +
                      std::to_string(gpus_per_node) + " GPUs exactly once");
    if (islands.size() > 1 && !(cross_island_bytes_per_s > 0))
      throw UserError("profile " + name + ": topology.cross_island_bytes_per_s must be a positive number with "
                      "more than one island");
  }
}

namespace {

CollectiveCurve ParseCurve(const JsonObject& link, const std::string& key, int group_size, double hop_latency) {
  CollectiveCurve c;
  c.measured_group_size = group_size;
  c.hop_latency_s = hop_latency;
  const nlohmann::json& arr = link.Raw(key);
  if (!arr.is_array() || arr.empty() || arr.size() > 1000)
    link.Fail(key, "must be a non-empty list of [bytes, seconds] pairs");
  for (const auto& pt : arr) {
    if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number())
      link.Fail(key, "must hold [bytes, seconds] pairs of numbers");
    double b = pt[0].get<double>(), s = pt[1].get<double>();
    if (!(b > 0) || !(s > 0) || !std::isfinite(b) || !std::isfinite(s))
      link.Fail(key, "has a non-positive bytes or seconds value");
    c.points.emplace_back(b, s);
  }
  std::sort(c.points.begin(), c.points.end());
  for (size_t i = 1; i < c.points.size(); ++i)
    if (c.points[i].first == c.points[i - 1].first) link.Fail(key, "lists the same size twice");
  return c;
}

LinkCollectives ParseLink(const JsonObject& collectives, const std::string& key) {
  JsonObject link = collectives.Object(key);
  int n = static_cast<int>(link.Integer("group_size", 2, 1 << 20));
  double hop = link.NumberIn("hop_latency_s", 0, 1, 5e-6);
  LinkCollectives l;
  l.all_gather = ParseCurve(link, "all_gather", n, hop);
  l.reduce_scatter = ParseCurve(link, "reduce_scatter", n, hop);
  l.all_reduce = ParseCurve(link, "all_reduce", n, hop);
  return l;
}

nlohmann::json CurveToJson(const CollectiveCurve& c) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& [b, s] : c.points) arr.push_back({b, s});
  return arr;
}

nlohmann::json LinkToJson(const LinkCollectives& l) {
  return {{"group_size", l.all_gather.measured_group_size},
          {"hop_latency_s", l.all_gather.hop_latency_s},
          {"all_gather", CurveToJson(l.all_gather)},
          {"reduce_scatter", CurveToJson(l.reduce_scatter)},
          {"all_reduce", CurveToJson(l.all_reduce)}};
}

}  // namespace

HardwareProfile HardwareProfileFromJson(const nlohmann::json& j, const std::string& context) {
  JsonObject root(j, context);
  HardwareProfile p;
  p.name = root.String("name");
  p.source = root.String("source");
  p.device_kind = root.String("device_kind", "cuda");
  if (p.device_kind != "cuda" && p.device_kind != "cpu") root.Fail("device_kind", "must be \"cuda\" or \"cpu\"");
  constexpr double kMaxBytes = 1e15, kMaxRate = 1e18;

  JsonObject mem = root.Object("memory");
  p.memory_bytes = mem.NumberIn("capacity_bytes", 1, kMaxBytes);
  p.cuda_context_bytes = mem.NumberIn("cuda_context_bytes", 0, kMaxBytes, 0);
  p.workspace_bytes = mem.NumberIn("workspace_bytes", 0, kMaxBytes, 0);
  p.collective_buffer_bytes = mem.NumberIn("collective_buffer_bytes", 0, kMaxBytes, 0);
  p.usable_fraction = mem.NumberIn("usable_fraction", 0.1, 1.0, 0.95);
  p.memory_margin_fraction = mem.NumberIn("margin_fraction", 0, 0.5, 0);

  JsonObject compute = root.Object("compute");
  p.bf16_peak_flops = compute.NumberIn("bf16_peak_flops", 1, kMaxRate);
  JsonObject gemm = compute.Object("gemm");
  p.gemm_max_efficiency = gemm.NumberIn("max_efficiency", 0.01, 1.0);
  p.gemm_half_efficiency_dim = gemm.NumberIn("half_efficiency_dim", 0, 1e6);
  JsonObject attn = compute.Object("attention");
  p.attention_forward_flops_per_s = attn.NumberIn("forward_flops_per_s", 1, kMaxRate);
  p.attention_backward_flops_per_s = attn.NumberIn("backward_flops_per_s", 1, kMaxRate);
  p.attention_reference_head_dim = static_cast<int>(attn.Integer("reference_head_dim", 0, 4096, 0));
  p.attention_reference_seq = static_cast<int>(attn.Integer("reference_seq", 0, 1 << 24, 0));
  p.attention_forward_half_rate_seq = attn.NumberIn("forward_half_rate_seq", 0, 1e7, 0);
  p.attention_backward_half_rate_seq = attn.NumberIn("backward_half_rate_seq", 0, 1e7, 0);
  const bool curve = p.attention_forward_half_rate_seq > 0 || p.attention_backward_half_rate_seq > 0;
  if (curve && p.attention_reference_seq == 0)
    attn.Fail("reference_seq", "must be set (the length the rates hold at) when a half_rate_seq is");
  if (attn.Has("by_head_dim")) {
    const nlohmann::json& widths = attn.Raw("by_head_dim");
    if (!widths.is_array()) attn.Fail("by_head_dim", "must be a list of {head_dim, forward_fraction, backward_fraction}");
    for (size_t i = 0; i < widths.size(); ++i) {
      JsonObject w(widths[i], attn.context() + ".by_head_dim[" + std::to_string(i) + "]");
      HardwareProfile::AttentionWidth width;
      width.head_dim = static_cast<int>(w.Integer("head_dim", 1, 4096));
      width.forward_fraction = w.NumberIn("forward_fraction", 0.01, 100);
      width.backward_fraction = w.NumberIn("backward_fraction", 0.01, 100);
      p.attention_widths.push_back(width);
    }
  }
  p.memory_bandwidth_bytes_per_s = compute.NumberIn("memory_bandwidth_bytes_per_s", 1, kMaxRate);
  p.elementwise_efficiency = compute.NumberIn("elementwise_efficiency", 0.01, 1.0, 0.7);
  p.kernel_launch_s = compute.NumberIn("kernel_launch_s", 0, 1, 4e-6);
  p.kernel_overhead_s = compute.NumberIn("kernel_overhead_s", 0, 1, 0);
  p.graph_kernel_overhead_s = compute.NumberIn("graph_kernel_overhead_s", 0, 1, 0);
  p.launch_queue_depth = static_cast<int>(compute.Integer("launch_queue_depth", 1, 1 << 20, 1024));
  p.compute_slowdown_during_collectives = compute.NumberIn("slowdown_during_collectives", 0, 10, 0.08);

  JsonObject host = root.Object("host");
  p.host_memory_bytes = host.NumberIn("memory_bytes_per_gpu", 1, kMaxBytes);
  p.host_to_device_bytes_per_s = host.NumberIn("host_to_device_bytes_per_s", 1, kMaxRate);
  p.device_to_host_bytes_per_s = host.NumberIn("device_to_host_bytes_per_s", 1, kMaxRate);
  p.copies_share_link = host.Bool("copies_share_link", false);
  p.cpu_adam_params_per_s = host.NumberIn("cpu_adam_params_per_s", 1, kMaxRate);
  // A profile that measured only one rate uses it for both.
  p.cpu_adam_alone_params_per_s = host.NumberIn("cpu_adam_alone_params_per_s", 1, kMaxRate, p.cpu_adam_params_per_s);
  p.cpu_adam_slowdown_during_copies = host.NumberIn("cpu_adam_slowdown_during_copies", 0, 10, 0);
  p.copy_slowdown_during_cpu_adam = host.NumberIn("copy_slowdown_during_cpu_adam", 0, 10, 0);
  p.step_overhead_s = host.NumberIn("step_overhead_s", 0, 3600, 0);
  p.nvme_read_bytes_per_s = host.NumberIn("nvme_read_bytes_per_s", 0, kMaxRate, 0);
  p.nvme_write_bytes_per_s = host.NumberIn("nvme_write_bytes_per_s", 0, kMaxRate, 0);

  JsonObject topo = root.Object("topology");
  p.gpus_per_node = static_cast<int>(topo.Integer("gpus_per_node", 1, 1024));
  if (topo.Has("islands")) {
    const nlohmann::json& islands = topo.Raw("islands");
    if (!islands.is_array()) topo.Fail("islands", "must be a list of lists of local GPU indices");
    for (const nlohmann::json& island : islands) {
      if (!island.is_array() || island.empty()) topo.Fail("islands", "must be a list of non-empty lists of local GPU indices");
      std::vector<int> gpus;
      for (const nlohmann::json& gpu : island) {
        if (!gpu.is_number_integer()) topo.Fail("islands", "must hold GPU indices (integers)");
        gpus.push_back(gpu.get<int>());
      }
      p.islands.push_back(gpus);
    }
  }
  p.cross_island_bytes_per_s = topo.NumberIn("cross_island_bytes_per_s", 0, kMaxRate, 0);

  JsonObject coll = root.Object("collectives");
  p.intra_node = ParseLink(coll, "intra_node");
  p.inter_node = ParseLink(coll, "inter_node");
  p.collective_slowdown_during_compute = coll.NumberIn("slowdown_during_compute", 0, 10, 0);
  if (coll.Has("nccl")) {
    JsonObject nccl = coll.Object("nccl");
    if (nccl.Has("settings")) {
      const nlohmann::json& settings = nccl.Raw("settings");
      if (!settings.is_object()) nccl.Fail("settings", "must map NCCL variable names to values");
      for (const auto& [name, value] : settings.items()) {
        if (!value.is_string()) nccl.Fail("settings", name + " must be a string");
        p.nccl_settings[name] = value.get<std::string>();
      }
    }
    p.nccl_settings_source = nccl.String("source", "");
  }
  p.price_per_gpu_hour = root.NumberIn("price_per_gpu_hour", 0, 1e6, 0);
  p.Validate();
  return p;
}


namespace {

nlohmann::json TopologyJson(const HardwareProfile& p) {
  nlohmann::json j = {{"gpus_per_node", p.gpus_per_node}};
  if (!p.islands.empty()) {
    j["islands"] = p.islands;
    j["cross_island_bytes_per_s"] = p.cross_island_bytes_per_s;
  }
  return j;
}

nlohmann::json AttentionJson(const HardwareProfile& p) {
  nlohmann::json j = {{"forward_flops_per_s", p.attention_forward_flops_per_s},
                      {"backward_flops_per_s", p.attention_backward_flops_per_s}};
  if (p.attention_reference_head_dim > 0) j["reference_head_dim"] = p.attention_reference_head_dim;
  if (p.attention_reference_seq > 0) {
    j["reference_seq"] = p.attention_reference_seq;
    j["forward_half_rate_seq"] = p.attention_forward_half_rate_seq;
    j["backward_half_rate_seq"] = p.attention_backward_half_rate_seq;
  }
  if (!p.attention_widths.empty()) {
    nlohmann::json widths = nlohmann::json::array();
    for (const HardwareProfile::AttentionWidth& w : p.attention_widths)
      widths.push_back({{"head_dim", w.head_dim},
                        {"forward_fraction", w.forward_fraction},
                        {"backward_fraction", w.backward_fraction}});
    j["by_head_dim"] = widths;
  }
  return j;
}

}  // namespace

nlohmann::json HardwareProfileToJson(const HardwareProfile& p) {
  nlohmann::json j = {{"name", p.name},
          {"source", p.source},
          {"device_kind", p.device_kind},
          {"memory",
           {{"capacity_bytes", p.memory_bytes},
            {"cuda_context_bytes", p.cuda_context_bytes},
            {"workspace_bytes", p.workspace_bytes},
            {"collective_buffer_bytes", p.collective_buffer_bytes},
            {"usable_fraction", p.usable_fraction},
            {"margin_fraction", p.memory_margin_fraction}}},
          {"compute",
           {{"bf16_peak_flops", p.bf16_peak_flops},
            {"gemm", {{"max_efficiency", p.gemm_max_efficiency}, {"half_efficiency_dim", p.gemm_half_efficiency_dim}}},
            {"attention", AttentionJson(p)},
            {"memory_bandwidth_bytes_per_s", p.memory_bandwidth_bytes_per_s},
            {"elementwise_efficiency", p.elementwise_efficiency},
            {"kernel_launch_s", p.kernel_launch_s},
            {"kernel_overhead_s", p.kernel_overhead_s},
            {"graph_kernel_overhead_s", p.graph_kernel_overhead_s},
            {"launch_queue_depth", p.launch_queue_depth},
            {"slowdown_during_collectives", p.compute_slowdown_during_collectives}}},
          {"host",
           {{"memory_bytes_per_gpu", p.host_memory_bytes},
            {"host_to_device_bytes_per_s", p.host_to_device_bytes_per_s},
            {"device_to_host_bytes_per_s", p.device_to_host_bytes_per_s},
            {"copies_share_link", p.copies_share_link},
            {"cpu_adam_params_per_s", p.cpu_adam_params_per_s},
            {"cpu_adam_alone_params_per_s", p.cpu_adam_alone_params_per_s},
            {"cpu_adam_slowdown_during_copies", p.cpu_adam_slowdown_during_copies},
            {"copy_slowdown_during_cpu_adam", p.copy_slowdown_during_cpu_adam},
            {"step_overhead_s", p.step_overhead_s},
            {"nvme_read_bytes_per_s", p.nvme_read_bytes_per_s},
            {"nvme_write_bytes_per_s", p.nvme_write_bytes_per_s}}},
          {"topology", TopologyJson(p)},
          {"collectives",
           {{"intra_node", LinkToJson(p.intra_node)},
            {"inter_node", LinkToJson(p.inter_node)},
            {"slowdown_during_compute", p.collective_slowdown_during_compute}}},
          {"price_per_gpu_hour", p.price_per_gpu_hour}};
  if (!p.nccl_settings.empty())
    j["collectives"]["nccl"] = {{"settings", p.nccl_settings}, {"source", p.nccl_settings_source}};
  return j;
}

std::string ProfilesDirectory() {
  if (const char* env = std::getenv("LLMPLAN_PROFILES"); env && *env) return env;
  return LLMPLAN_SOURCE_PROFILES_DIR;
}

std::vector<std::string> BuiltinProfileNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(ProfilesDirectory(), ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

HardwareProfile LoadHardwareProfile(const std::string& name_or_path) {
  if (name_or_path.empty()) throw UserError("hardware profile name is empty: give a profile name or a path to a profile JSON");
  std::error_code ec;
  std::filesystem::path path(name_or_path);
  bool looks_like_path = name_or_path.find('/') != std::string::npos || path.extension() == ".json";
  if (!looks_like_path) path = std::filesystem::path(ProfilesDirectory()) / (name_or_path + ".json");
  if (!std::filesystem::is_regular_file(path, ec)) {
    // Something that is there but not a file (/dev/zero, a FIFO) gets
    // ReadJsonFile's answer, which says what it is.
    if (looks_like_path && std::filesystem::exists(path, ec)) ReadJsonFile(path.string(), "profile");
    if (looks_like_path) throw UserError("profile '" + name_or_path + "' does not exist; check the path");
    std::string known;
    for (const auto& n : BuiltinProfileNames()) known += (known.empty() ? "" : ", ") + n;
    throw UserError("unknown GPU profile '" + name_or_path + "': give one of " + known + ", or a path to a profile JSON");
  }
  return HardwareProfileFromJson(ReadJsonFile(path.string(), "profile"), "profile " + path.filename().string());
}

}  // namespace llmplan
