// AssembleProfile (see profile_assembly.h).
#include "executor/profile/profile_assembly.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "executor/doctor/gpu_islands.h"
#include "executor/profile/gemm_fit.h"
#include "planner/attention_rate_fit.h"
#include "base/format.h"  // FormatBytes

namespace llmplan::executor {

namespace {

std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

std::string Micros(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f us", seconds * 1e6);
  return text;
}

nlohmann::json PointsJson(const std::vector<std::pair<double, double>>& points, double traffic_factor) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [bytes, seconds] : points) rows.push_back({bytes, seconds, bytes * traffic_factor / seconds});
  return rows;
}

CollectiveCurve Curve(const std::vector<std::pair<double, double>>& points, int group_size, double hop_latency_s) {
  CollectiveCurve c;
  c.measured_group_size = group_size;
  c.hop_latency_s = hop_latency_s;
  c.points = points;
  std::sort(c.points.begin(), c.points.end());
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

std::string Times(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "x%.2f", ratio);
  return text;
}

// Collectives and compute beside each other (ContentionMeasurement): the
// profile's two slowdowns, the raw table (`j`), and a sentence for the
// source. Changes nothing when no pair of times in it is positive. Each
// slowdown is one number for every size and kind, as the simulator prices
// it: for the collectives the median over every (op, size) row, so one
// odd point does not move it.
void AssembleContention(const ContentionMeasurement& c, HardwareProfile& p, nlohmann::json& j, std::string& sentence) {
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> ratios;
  for (const ContentionPoint& point : c.collectives) {
    if (!(point.alone_s > 0) || !(point.beside_compute_s > 0)) continue;
    const double ratio = point.beside_compute_s / point.alone_s;
    ratios.push_back(ratio);
    rows.push_back({{"op", point.op},
                    {"bytes", point.bytes},
                    {"alone_s", point.alone_s},
                    {"beside_compute_s", point.beside_compute_s},
                    {"beside_over_alone", ratio}});
  }
  const bool compute = c.gemm_loop_alone_s > 0 && c.gemm_loop_beside_gathers_s > 0;
  if (ratios.empty() && !compute) return;
  double flops = 0;
  nlohmann::json shapes = nlohmann::json::array();
  for (const GemmShape& g : c.block_gemms) {
    flops += g.Flops();
    shapes.push_back({{"what", g.what}, {"tokens", g.tokens}, {"in", g.in}, {"out", g.out}});
  }
  j = {{"how",
        "every GPU queues one side's work to outlast the other's timed batch (checked with events on both streams), "
        "then the other runs back to back; CUDA events on the timed op's stream, slowest GPU, median of batches; "
        "NCCL on a highest-priority stream, GEMMs on the current stream, as the executor runs them"},
       {"group_size", c.group_size},
       {"gemm_pass", {{"call", "at::linear(x[tokens, in], W[out, in]) bf16, one pass over the block in call order"},
                      {"shapes", shapes},
                      {"flops", flops}}}};
  std::ostringstream s;
  s << "Contention among " << c.group_size << " GPUs: ";
  if (!ratios.empty()) {
    const double median = Median(ratios);
    p.collective_slowdown_during_compute = std::clamp(median - 1, 0.0, 10.0);
    j["collectives"] = {{"columns", "op, full buffer bytes, seconds per call alone and beside the GEMM passes"},
                        {"table", rows},
                        {"median_beside_over_alone", median},
                        {"slowdown_during_compute", p.collective_slowdown_during_compute}};
    s << "NCCL collectives beside a Llama-3-8B block's forward GEMMs took " << Times(median)
      << " their time alone (collectives.slowdown_during_compute; median of " << ratios.size() << ", "
      << Times(*std::min_element(ratios.begin(), ratios.end())) << " to "
      << Times(*std::max_element(ratios.begin(), ratios.end())) << ")";
  }
  if (compute) {
    const double ratio = c.gemm_loop_beside_gathers_s / c.gemm_loop_alone_s;
    p.compute_slowdown_during_collectives = std::clamp(ratio - 1, 0.0, 10.0);
    j["compute"] = {{"all_gather_bytes", c.gather_bytes},
                    {"alone_s_per_pass", c.gemm_loop_alone_s},
                    {"beside_all_gathers_s_per_pass", c.gemm_loop_beside_gathers_s},
                    {"alone_flops_per_s", flops / c.gemm_loop_alone_s},
                    {"beside_all_gathers_flops_per_s", flops / c.gemm_loop_beside_gathers_s},
                    {"beside_over_alone", ratio},
                    {"slowdown_during_collectives", p.compute_slowdown_during_collectives}};
    s << (ratios.empty() ? "" : "; ") << "the GEMMs beside back-to-back " << FormatBytes(c.gather_bytes)
      << " all-gathers " << Times(ratio) << " theirs (compute.slowdown_during_collectives)";
  }
  s << ". ";
  sentence = s.str();
}

struct GemmResult {
  GemmEfficiencyFit fit;
  double peak = 0;
  std::string note;
};

// Fits the GEMM rows against the peak MFU is quoted against: the base's
// datasheet peak on CUDA; on the CPU the threads' estimated bf16 peak, raised
// to the fit's asymptote when that is higher (the estimate is then wrong, not
// the rates: turbo clocks, wider units than the flags tell).
GemmResult FitGemms(const ProfileMeasurements& m, const HardwareProfile& base, bool cuda) {
  GemmResult r;
  std::vector<GemmSample> samples;
  for (const GemmMeasurement& g : m.gemms)
    if (g.shape.in_fit) samples.push_back({g.shape.MinDim(), g.FlopsPerSecond()});
  r.peak = cuda || m.machine.cpu_peak_flops <= 0 ? base.bf16_peak_flops : m.machine.cpu_peak_flops;
  r.fit = FitGemmEfficiency(samples, r.peak);
  if (r.fit.max_efficiency > 1 && !cuda) {
    r.note = "; the fit's asymptote exceeded the estimated peak " + FormatRate(r.peak, "FLOP/s") +
             ", so the peak is the asymptote";
    r.peak *= r.fit.max_efficiency;
    r.fit = FitGemmEfficiency(samples, r.peak);
  } else if (r.fit.max_efficiency > 1) {
    r.note = "; the fit's max_efficiency " + std::to_string(r.fit.max_efficiency).substr(0, 5) +
             " exceeds 1 against the datasheet peak and is held at 1";
  }
  return r;
}

nlohmann::json MachineJson(const ProfiledMachine& machine) {
  nlohmann::json j = {{"device_kind", machine.device_kind},
                      {"device_name", machine.device_name},
                      {"gpus", machine.gpus},
                      {"driver", machine.driver},
                      {"cuda_runtime", machine.cuda_runtime},
                      {"nccl", machine.nccl},
                      {"libtorch", machine.torch},
                      {"llmplan", machine.llmplan},
                      {"host", machine.host},
                      {"host_cores", machine.host_cores},
                      {"host_memory_bytes", machine.host_memory_bytes},
                      {"date_utc", machine.date_utc}};
  if (machine.device_kind == "cpu") {
    j["cpu_peak_flops_estimate"] = machine.cpu_peak_flops;
    j["cpu_peak_how"] = machine.cpu_peak_how;
  }
  return j;
}

nlohmann::json GemmTable(const std::vector<GemmMeasurement>& gemms) {
  nlohmann::json rows = nlohmann::json::array();
  for (const GemmMeasurement& g : gemms) {
    rows.push_back({{"what", g.shape.what},
                    {"tokens", g.shape.tokens},
                    {"in", g.shape.in},
                    {"out", g.shape.out},
                    {"min_dim", g.shape.MinDim()},
                    {"dtype", g.dtype},
                    {"in_fit", g.shape.in_fit},
                    {"seconds", g.seconds},
                    {"flops_per_s", g.FlopsPerSecond()}});
    if (g.sustained_seconds > 0) {
      rows.back()["sustained_seconds"] = g.sustained_seconds;
      rows.back()["sustained_flops_per_s"] = g.shape.Flops() / g.sustained_seconds;
    }
  }
  return rows;
}

}  // namespace

AssembledProfile AssembleProfile(const ProfileMeasurements& m, const HardwareProfile& base, const std::string& name) {
  const bool cuda = m.machine.device_kind == "cuda";
  AssembledProfile out;
  HardwareProfile& p = out.profile;
  p = base;
  p.name = name;
  p.device_kind = cuda ? "cuda" : "cpu";
  std::vector<std::string>& kept = out.from_base;
  nlohmann::json& j = out.measurements;
  j["machine"] = MachineJson(m.machine);
  j["mode"] = m.quick ? "quick" : "full";
  j["wall_seconds"] = m.wall_seconds;

  // --- GEMMs ---
  const GemmResult gemm = FitGemms(m, base, cuda);
  p.bf16_peak_flops = gemm.peak;
  if (cuda) kept.push_back("compute.bf16_peak_flops");
  p.gemm_max_efficiency = std::clamp(gemm.fit.max_efficiency, 0.01, 1.0);
  p.gemm_half_efficiency_dim = std::clamp(gemm.fit.half_efficiency_dim, 0.0, 1e6);
  const std::string gemm_dtype = m.gemms.empty() ? "" : m.gemms.front().dtype;
  j["gemm"] = {{"call", "at::linear(x[tokens, in], W[out, in])"},
               {"dtype", gemm_dtype},
               {"fit",
                {{"model", "1/rate = a + b/d, d = min(tokens, in, out); max_efficiency = 1/(a*peak), "
                           "half_efficiency_dim = b/a"},
                 {"peak_flops", gemm.peak},
                 {"max_efficiency", gemm.fit.max_efficiency},
                 {"half_efficiency_dim", gemm.fit.half_efficiency_dim},
                 {"rms_relative_error", gemm.fit.rms_relative_error}}},
               {"table", GemmTable(m.gemms)}};
  if (!m.cpu_fp32_gemms.empty()) j["gemm"]["cpu_fp32_table"] = GemmTable(m.cpu_fp32_gemms);

  // --- attention: each width's rate on a curve over the sequence lengths
  // (planner/attention_rate_fit.h); the first width measured is the
  // reference, the others fractions of it ---
  std::vector<AttentionRateRow> rate_rows;
  nlohmann::json attention_rows = nlohmann::json::array();
  for (const AttentionMeasurement& a : m.attention) {
    const double backward_s = std::max(a.forward_backward_s - a.forward_s, 1e-12);
    rate_rows.push_back({static_cast<int>(a.shape.head_dim), static_cast<double>(a.shape.seq), a.shape.ForwardFlops(),
                         a.forward_s, a.shape.BackwardFlops(), backward_s});
    attention_rows.push_back({{"batch", a.shape.batch},
                              {"heads", a.shape.heads},
                              {"kv_heads", a.shape.kv_heads},
                              {"seq", a.shape.seq},
                              {"head_dim", a.shape.head_dim},
                              {"dtype", a.dtype},
                              {"backend", a.backend},
                              {"forward_s", a.forward_s},
                              {"forward_backward_s", a.forward_backward_s},
                              {"forward_flops_per_s", a.shape.ForwardFlops() / a.forward_s},
                              {"backward_flops_per_s", a.shape.BackwardFlops() / backward_s}});
  }
  if (!rate_rows.empty()) FitAttentionRates(rate_rows, p);
  const std::string backend = m.attention.empty() ? "" : m.attention.front().backend;
  j["attention"] = {{"call", cuda ? "at::scaled_dot_product_attention(is_causal, enable_gqa) forward; backward by "
                                    "torch::autograd::grad"
                                  : "the CPU executor's attention (compat::CausalAttention) forward and backward"},
                    {"flops", "forward 2*b*s^2*heads*head_dim (causal half), backward 2.5x forward; backward seconds = "
                              "forward+backward - forward"},
                    {"table", attention_rows}};

  // --- memory-bound kernels ---
  p.memory_bandwidth_bytes_per_s = m.copy.BytesPerSecond();
  p.elementwise_efficiency = std::clamp(m.add.BytesPerSecond() / m.copy.BytesPerSecond(), 0.01, 1.0);
  j["memory_bandwidth"] = {
      {"copy", {{"what", m.copy.what}, {"bytes", m.copy.bytes}, {"seconds", m.copy.seconds}, {"bytes_per_s", m.copy.BytesPerSecond()}}},
      {"add", {{"what", m.add.what}, {"bytes", m.add.bytes}, {"seconds", m.add.seconds}, {"bytes_per_s", m.add.BytesPerSecond()}}}};

  // --- kernel launch ---
  p.kernel_launch_s = m.launch.host_s;
  p.kernel_overhead_s = m.launch.device_s;
  p.graph_kernel_overhead_s = m.launch.graph_device_s;
  j["kernel_launch"] = {{"op", "x.add_(1) on a one-element tensor"},
                        {"kernels", m.launch.kernels},
                        {"host_s_per_kernel", m.launch.host_s},
                        {"device_s_per_kernel", m.launch.device_s},
                        {"device_round", m.launch.device_round},
                        {"graph_device_s_per_kernel", m.launch.graph_device_s}};

  // --- host <-> device copies ---
  if (m.host_copies) {
    const HostCopyMeasurement& c = *m.host_copies;
    p.host_to_device_bytes_per_s = c.bytes / c.host_to_device_s;
    p.device_to_host_bytes_per_s = c.bytes / c.device_to_host_s;
    const double both = c.bytes / c.both_host_to_device_s + c.bytes / c.both_device_to_host_s;
    // Full duplex: both directions at once move ~2x one direction; one
    // shared link: ~1x.
    p.copies_share_link = both < 1.5 * std::max(p.host_to_device_bytes_per_s, p.device_to_host_bytes_per_s);
    j["host_copies"] = {{"bytes", c.bytes},
                        {"host_to_device_bytes_per_s", p.host_to_device_bytes_per_s},
                        {"device_to_host_bytes_per_s", p.device_to_host_bytes_per_s},
                        {"both_at_once",
                         {{"host_to_device_bytes_per_s", c.bytes / c.both_host_to_device_s},
                          {"device_to_host_bytes_per_s", c.bytes / c.both_device_to_host_s}}},
                        {"copies_share_link", p.copies_share_link}};
  } else {
    kept.insert(kept.end(), {"host.host_to_device_bytes_per_s", "host.device_to_host_bytes_per_s", "host.copies_share_link"});
  }

  // --- collectives ---
  nlohmann::json curves = nlohmann::json::array();
  for (const CollectiveMeasurement& c : m.collectives) {
    const double f = static_cast<double>(c.group_size - 1) / c.group_size;
    curves.push_back({{"group_size", c.group_size},
                      {"dtype", "bf16"},
                      {"columns", "[full buffer bytes, seconds, bus bandwidth bytes/s]"},
                      {"all_gather", PointsJson(c.all_gather, f)},
                      {"reduce_scatter", PointsJson(c.reduce_scatter, f)},
                      {"all_reduce", PointsJson(c.all_reduce, 2 * f)},
                      {"communicator_bytes", c.communicator_bytes}});
  }
  if (!m.collectives.empty()) {
    const CollectiveMeasurement& c = m.collectives.front();
    const double hop = base.intra_node.all_gather.hop_latency_s;
    p.intra_node.all_gather = Curve(c.all_gather, c.group_size, hop);
    p.intra_node.reduce_scatter = Curve(c.reduce_scatter, c.group_size, hop);
    p.intra_node.all_reduce = Curve(c.all_reduce, c.group_size, hop);
    kept.push_back("collectives.intra_node.hop_latency_s");
    j["collectives"] = curves;
  } else {
    kept.push_back("collectives.intra_node");
  }
  kept.push_back("collectives.inter_node");

  // --- collectives and compute beside each other ---
  std::string contention_sentence;
  nlohmann::json contention;
  if (m.contention) AssembleContention(*m.contention, p, contention, contention_sentence);
  if (!contention.contains("collectives")) kept.push_back("collectives.slowdown_during_compute");
  if (!contention.contains("compute")) kept.push_back("compute.slowdown_during_collectives");
  if (!contention.is_null()) j["contention"] = contention;

  // --- CPU AdamW ---
  const CpuAdamWMeasurement& adam = m.cpu_adamw;
  const double alone = static_cast<double>(adam.params) / adam.seconds;
  const double concurrent =
      adam.workers > 1 ? static_cast<double>(adam.params_each) / adam.concurrent_seconds : alone;
  // The host's rate: every GPU's process at once, summed (the planner splits
  // it among the processes a plan runs on one node).
  p.cpu_adam_params_per_s = adam.workers > 1 ? concurrent * adam.workers : alone;
  // And one process with the host to itself (a plan with one GPU per node).
  p.cpu_adam_alone_params_per_s = alone;
  j["cpu_adamw"] = {{"call", "CpuAdamW (executor/optimizer/cpu_adamw.h), writing the bf16 copy in the same pass"},
                    {"params", adam.params},
                    {"alone", {{"threads", adam.threads}, {"seconds", adam.seconds}, {"params_per_s", alone}}},
                    {"every_gpu_at_once",
                     {{"workers", adam.workers},
                      {"params_each", adam.workers > 1 ? adam.params_each : adam.params},
                      {"threads_each", std::max(1, adam.threads / std::max(1, adam.workers))},
                      {"seconds", adam.workers > 1 ? adam.concurrent_seconds : adam.seconds},
                      {"params_per_s_each", concurrent}}}};

  // --- CPU AdamW beside pinned copies ---
  const CpuAdamWCopiesMeasurement* beside =
      m.cpu_adamw_beside_copies && m.cpu_adamw_beside_copies->alone_s > 0 &&
              m.cpu_adamw_beside_copies->beside_copies_s > 0
          ? &*m.cpu_adamw_beside_copies
          : nullptr;
  if (beside) {
    const double ratio = beside->beside_copies_s / beside->alone_s;
    p.cpu_adam_slowdown_during_copies = std::clamp(ratio - 1, 0.0, 10.0);
    j["cpu_adamw"]["beside_copies"] = {
        {"how",
         "the update alone, then right after queueing pinned cudaMemcpyAsync copies back to back both ways (device "
         "to host and host to device, a stream each) to outlast it, counted only when both were still running at "
         "its end; medians; one process on all the host's threads"},
        {"params", beside->params},
        {"threads", beside->threads},
        {"copy_bytes", beside->copy_bytes},
        {"alone_s", beside->alone_s},
        {"beside_copies_s", beside->beside_copies_s},
        {"beside_over_alone", ratio},
        {"slowdown_during_copies", p.cpu_adam_slowdown_during_copies}};
  } else {
    kept.push_back("host.cpu_adam_slowdown_during_copies");
  }
  const bool copies_beside = beside && beside->copies_alone_s > 0 && beside->copies_beside_update_s > 0;
  if (copies_beside) {
    p.copy_slowdown_during_cpu_adam = std::clamp(beside->copies_beside_update_s / beside->copies_alone_s - 1, 0.0, 10.0);
    j["cpu_adamw"]["copies_beside"] = {
        {"how",
         "one pinned cudaMemcpyAsync copy each way at once (a stream each), alone, then while the update ran back to "
         "back on another thread of its own; medians"},
        {"copy_bytes", beside->copy_bytes},
        {"copies_alone_s", beside->copies_alone_s},
        {"copies_beside_update_s", beside->copies_beside_update_s},
        {"slowdown_during_cpu_adam", p.copy_slowdown_during_cpu_adam}};
  } else {
    kept.push_back("host.copy_slowdown_during_cpu_adam");
  }

  // --- GPU islands (2+ GPUs): the profile's own node only ---
  if (!m.peer_links.empty()) {
    const int gpus = m.machine.gpus;
    const GpuIslands found = FindGpuIslands(gpus, m.peer_links);
    nlohmann::json links = nlohmann::json::array();
    for (const PeerLink& l : m.peer_links)
      links.push_back({{"a", l.a}, {"b", l.b}, {"peer_access", l.peer_access}, {"bytes_per_s", l.BytesPerSecond()},
                       {"error", l.error}});
    j["islands"] = {{"how", "cudaMemcpyPeerAsync of 64 MiB each way per pair; a pair with peer access and at least half "
                            "the fastest pair's rate shares an island"},
                    {"links", links},
                    {"islands", found.islands},
                    {"cross_island_bytes_per_s", found.cross_island_bytes_per_s}};
    p.islands.clear();
    p.cross_island_bytes_per_s = 0;
    if (found.islands.size() > 1 && gpus == p.gpus_per_node) {
      p.islands = found.islands;
      p.cross_island_bytes_per_s = found.cross_island_bytes_per_s;
    } else if (found.islands.size() > 1) {
      j["islands"]["not_recorded"] = "measured " + std::to_string(gpus) + " GPUs; the profile's nodes have " +
                                     std::to_string(p.gpus_per_node);
    }
  }

  // --- the local SSD (NVMe offload) ---
  if (m.disk) {
    const DiskMeasurement& d = *m.disk;
    p.nvme_write_bytes_per_s = static_cast<double>(d.bytes) / d.write_seconds;
    p.nvme_read_bytes_per_s = static_cast<double>(d.bytes) / d.read_seconds;
    j["nvme"] = {{"call", "DirectFile (executor/hardware/direct_file.h): sequential pwrite, fdatasync, then pread"},
                 {"dir", d.dir},
                 {"direct", d.direct},
                 {"bytes", d.bytes},
                 {"block_bytes", d.block_bytes},
                 {"write_seconds", d.write_seconds},
                 {"read_seconds", d.read_seconds},
                 {"write_bytes_per_s", p.nvme_write_bytes_per_s},
                 {"read_bytes_per_s", p.nvme_read_bytes_per_s}};
  } else {
    kept.insert(kept.end(), {"host.nvme_read_bytes_per_s", "host.nvme_write_bytes_per_s"});
  }

  // --- memory ---
  if (cuda && m.fixed_memory) {
    const FixedMemoryMeasurement& f = *m.fixed_memory;
    p.memory_bytes = f.capacity_bytes;
    // Everything on the device that the caching allocator does not hold, with
    // the kernels the GEMMs, attention and elementwise ops loaded: what a
    // training process has gone without by its first step.
    p.cuda_context_bytes = std::max(0.0, f.used_after_compute_bytes - f.reserved_after_compute_bytes);
    p.workspace_bytes = f.workspace_bytes;
    j["fixed_memory"] = {{"capacity_bytes", f.capacity_bytes},
                         {"used_after_context_bytes", f.used_after_context_bytes},
                         {"used_after_compute_bytes", f.used_after_compute_bytes},
                         {"reserved_after_compute_bytes", f.reserved_after_compute_bytes},
                         {"cuda_context_bytes", p.cuda_context_bytes},
                         {"workspace_bytes", f.workspace_bytes}};
    if (!m.collectives.empty() && m.collectives.front().communicator_bytes > 0) {
      p.collective_buffer_bytes = m.collectives.front().communicator_bytes;
      j["fixed_memory"]["collective_buffer_bytes"] = p.collective_buffer_bytes;
    } else {
      kept.push_back("memory.collective_buffer_bytes");
    }
  } else if (cuda) {
    kept.insert(kept.end(), {"memory.capacity_bytes", "memory.cuda_context_bytes", "memory.workspace_bytes",
                             "memory.collective_buffer_bytes"});
  } else {
    // The CPU executor's "device" is the host: its memory, no CUDA context,
    // no cuBLAS workspace, no NCCL buffers.
    p.memory_bytes = m.machine.host_memory_bytes;
    p.cuda_context_bytes = p.workspace_bytes = p.collective_buffer_bytes = 0;
  }
  p.host_memory_bytes = m.machine.host_memory_bytes / std::max(1, cuda ? m.machine.gpus : 1);
  kept.insert(kept.end(), {"memory.usable_fraction", "memory.margin_fraction", "host.step_overhead_s",
                           "compute.launch_queue_depth", "topology.gpus_per_node", "price_per_gpu_hour"});
  j["from_base"] = {{"profile", base.name}, {"fields", kept}};
  if (!m.skipped.empty()) j["skipped"] = m.skipped;

  // --- source: when, where, how ---
  const ProfiledMachine& machine = m.machine;
  std::ostringstream s;
  s << "measured by llmplan profile" << (m.quick ? " --quick" : "") << " (" << machine.llmplan << ") on "
    << machine.date_utc << " on host " << machine.host << ": ";
  if (cuda) {
    s << machine.gpus << " x " << machine.device_name << " (driver " << machine.driver << ", CUDA runtime "
      << machine.cuda_runtime << ", NCCL " << machine.nccl << ", LibTorch " << machine.torch << ")";
  } else {
    s << machine.device_name << " (CPU executor, LibTorch " << machine.torch << ")";
  }
  s << ", " << machine.host_cores << " host threads, " << FormatBytes(machine.host_memory_bytes) << " host memory. ";
  s << "GEMM: " << m.gemms.size() << " at::linear " << gemm_dtype << " shapes";
  double burst_total_s = 0, sustained_total_s = 0;
  for (const GemmMeasurement& g : m.gemms) {
    if (!g.shape.in_fit || g.sustained_seconds <= 0) continue;
    burst_total_s += g.seconds;
    sustained_total_s += g.sustained_seconds;
  }
  if (burst_total_s > 0)
    s << " timed as a step runs them, in bursts of ~" << std::lround(1000 * kGemmBurstSeconds) << " ms after "
      << std::lround(1000 * kGemmIdleSeconds) << " ms idle (back to back, at the power limit, the fitted shapes took "
      << Percent(sustained_total_s / burst_total_s - 1) << " longer in all; the table's sustained_seconds)";
  s << ", least squares on 1/rate = a + b/d "
    << "(d the smallest side) against a peak of " << FormatRate(gemm.peak, "FLOP/s")
    << (cuda ? " (the base's datasheet figure)" : " (" + machine.cpu_peak_how + ")") << " gives max_efficiency "
    << std::to_string(p.gemm_max_efficiency).substr(0, 5) << ", half_efficiency_dim "
    << static_cast<long>(std::lround(p.gemm_half_efficiency_dim)) << " (rms error "
    << Percent(gemm.fit.rms_relative_error) << ")" << gemm.note << ". ";
  s << "Attention: " << m.attention.size() << " shapes, " << (backend.empty() ? "" : backend + " backend, ")
    << (p.attention_reference_seq > 0 ? "on rate = r * seq / (seq + half) per direction: forward "
                                      : "total FLOPs over total seconds: forward ")
    << FormatRate(p.attention_forward_flops_per_s, "FLOP/s") << ", backward "
    << FormatRate(p.attention_backward_flops_per_s, "FLOP/s")
    << (p.attention_reference_head_dim > 0 ? " at head_dim " + std::to_string(p.attention_reference_head_dim) : "")
    << (p.attention_reference_seq > 0 ? " and " + std::to_string(p.attention_reference_seq) + " tokens" : "");
  for (const HardwareProfile::AttentionWidth& w : p.attention_widths)
    s << "; head_dim " << w.head_dim << " at " << Percent(w.forward_fraction) << " / " << Percent(w.backward_fraction)
      << " of those";
  if (p.attention_reference_seq > 0)
    s << "; half those rates at " << std::lround(p.attention_forward_half_rate_seq) << " / "
      << std::lround(p.attention_backward_half_rate_seq) << " tokens";
  s << ". ";
  s << "Memory: " << m.copy.what << " " << FormatRate(p.memory_bandwidth_bytes_per_s, "B/s") << " (read + write); "
    << m.add.what << " reaches " << Percent(p.elementwise_efficiency) << " of it. ";
  s << "Kernel launch (" << m.launch.kernels << " tiny ops";
  if (m.launch.device_round > 0) s << ", on the device in rounds of " << m.launch.device_round;
  s << "): " << Micros(p.kernel_launch_s) << " host, " << Micros(p.kernel_overhead_s) << " device each";
  if (p.graph_kernel_overhead_s > 0) s << ", " << Micros(p.graph_kernel_overhead_s) << " replayed from a CUDA graph";
  s << ". ";
  if (m.host_copies) {
    s << "Pinned copies of " << FormatBytes(m.host_copies->bytes) << ": " << FormatRate(p.host_to_device_bytes_per_s, "B/s")
      << " to the device, " << FormatRate(p.device_to_host_bytes_per_s, "B/s") << " back"
      << (p.copies_share_link ? ", sharing one link when both run. " : ", full duplex. ");
  }
  if (!m.collectives.empty()) {
    const CollectiveMeasurement& c = m.collectives.front();
    s << "Collectives: NCCL (ncclCommInitAll, one group call per size) among " << c.group_size << " GPUs, bf16, "
      << FormatBytes(c.all_gather.front().first) << " to " << FormatBytes(c.all_gather.back().first)
      << "; one communicator took " << FormatBytes(c.communicator_bytes) << ". ";
  }
  s << contention_sentence;
  s << "CPU AdamW: " << FormatRate(alone, "params/s") << " alone on " << adam.threads << " threads";
  if (adam.workers > 1)
    s << ", " << FormatRate(concurrent, "params/s") << " per GPU with " << adam.workers << " at once ("
      << FormatRate(concurrent * adam.workers, "params/s") << " for the host: the profile's figure)";
  if (beside)
    s << "; beside pinned copies of " << FormatBytes(beside->copy_bytes) << " both ways "
      << Times(beside->beside_copies_s / beside->alone_s) << " its time alone (host.cpu_adam_slowdown_during_copies)";
  if (copies_beside)
    s << "; the copies beside the update x" << std::to_string(1 + p.copy_slowdown_during_cpu_adam).substr(0, 4)
      << " their time alone (host.copy_slowdown_during_cpu_adam)";
  s << ". ";
  if (m.disk)
    s << "NVMe (" << m.disk->dir << (m.disk->direct ? ", O_DIRECT" : ", buffered: O_DIRECT refused") << "): "
      << FormatBytes(static_cast<double>(m.disk->bytes)) << " in " << FormatBytes(static_cast<double>(m.disk->block_bytes))
      << " blocks, write " << FormatRate(p.nvme_write_bytes_per_s, "B/s") << " (with the flush), read "
      << FormatRate(p.nvme_read_bytes_per_s, "B/s") << ". ";
  if (cuda && m.fixed_memory) {
    s << "Fixed memory: context and kernels " << FormatBytes(p.cuda_context_bytes)
      << " (device used minus the caching allocator's reserved, after the compute measurements), cuBLAS workspaces "
      << FormatBytes(p.workspace_bytes) << " (allocated by the first GEMMs). ";
  }
  if (!m.skipped.empty()) {
    s << "Not measured:";
    for (const std::string& why : m.skipped) s << " " << why << ";";
    s << " ";
  }
  s << "Kept from base profile " << base.name << ":";
  for (size_t i = 0; i < kept.size(); ++i) s << (i ? ", " : " ") << kept[i];
  s << ".";
  p.source = s.str();

  // Round trip through the loader: an absurd measurement is refused here,
  // naming the field, rather than written.
  out.profile = HardwareProfileFromJson(HardwareProfileToJson(p), "measured profile " + name);
  return out;
}

nlohmann::json ProfileFileJson(const AssembledProfile& assembled) {
  nlohmann::json j = HardwareProfileToJson(assembled.profile);
  j["measurements"] = assembled.measurements;
  return j;
}

std::string FormatRate(double value, const char* unit) {
  static const char* kPrefix[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (i < 5 && value >= 1000) {
    value /= 1000;
    ++i;
  }
  char text[64];
  std::snprintf(text, sizeof text, value >= 100 ? "%.0f %s%s" : "%.3g %s%s", value, kPrefix[i], unit);
  return text;
}

std::string DefaultBaseProfile(const std::string& device_kind, const std::string& device_name,
                               const std::vector<std::string>& builtin_names) {
  if (device_kind == "cpu") return "cpu";
  std::string lower = device_name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const std::string& profile : builtin_names) {
    const std::string family = profile.substr(0, profile.find('-'));
    if (family != "cpu" && !family.empty() && lower.find(family) != std::string::npos) return profile;
  }
  return "h200-sxm";
}

}  // namespace llmplan::executor
