// RunProfile (see profiler.h): what `llmplan profile` measures, in order.
// GEMMs run first, so the cuBLAS workspaces they allocate can be counted;
// the fixed device memory is read after every compute kernel has loaded and
// before NCCL takes its share.
#include "executor/profile/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <c10/util/Exception.h>

#include "executor/hardware/cuda_machine.h"
#include "executor/hardware/host_info.h"
#include "executor/profile/contention.h"
#include "executor/profile/cpu_adamw_copies.h"
#include "executor/profile/cpu_adamw_rate.h"
#include "executor/profile/disk_rate.h"
#include "planner/nvme_offload.h"
#include "executor/profile/host_copies.h"
#include "executor/profile/nccl_collectives.h"
#include "executor/profile/progress.h"
#include "executor/profile/torch_measurements.h"
#include "base/atomic_file.h"
#include "base/format.h"  // FormatBytes
#include "planner/hardware_profile.h"
#include "base/user_error.h"

namespace llmplan::executor {

namespace {

constexpr double kMiB = 1 << 20;

// Fails before minutes of measuring, not after.
void CheckOutputPath(const std::string& path) {
  if (path.empty()) throw UserError("-o is empty: give the profile file to write, e.g. -o profiles/mygpu.json");
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw UserError("-o " + path + " is a directory: give the profile file to write, e.g. " + path + "/mygpu.json");
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!std::filesystem::is_directory(parent, error))
    throw UserError("-o " + path + ": directory " + parent.string() + " does not exist; create it first");
  if (::access(parent.c_str(), W_OK) != 0)
    throw UserError("-o " + path + ": directory " + parent.string() + " is not writable");
}

TimingBudget Budget(bool quick, bool cuda) {
  TimingBudget b;
  b.batch_seconds = quick ? (cuda ? 0.02 : 0.03) : 0.2;
  return b;
}

std::string Span(const std::vector<AttentionShape>& shapes) {
  return std::to_string(shapes.front().seq) + "-" + std::to_string(shapes.back().seq);
}

std::string Gflops(const GemmMeasurement& g) { return FormatRate(g.FlopsPerSecond(), "FLOP/s"); }

// The rate of the largest fitted GEMM and of the 8192^3 reference, for the stage's note.
std::string GemmNote(const std::vector<GemmMeasurement>& rows) {
  const GemmMeasurement* best = nullptr;
  std::string note;
  for (const GemmMeasurement& g : rows) {
    if (g.shape.what == "square 8192") note = "8192^3 at " + Gflops(g) + "; ";
    if (best == nullptr || g.FlopsPerSecond() > best->FlopsPerSecond()) best = &g;
  }
  const bool square = best->shape.what.rfind("square", 0) == 0;
  return note + "fastest " + best->shape.what + (square ? "" : " at " + std::to_string(best->shape.tokens) + " tokens") +
         ": " + Gflops(*best);
}

std::string AttentionNote(const std::vector<AttentionMeasurement>& rows) {
  const AttentionMeasurement& a = rows.back();
  return "seq " + std::to_string(a.shape.seq) + " (" + a.backend + "): forward " +
         FormatRate(a.shape.ForwardFlops() / a.forward_s, "FLOP/s") + ", backward " +
         FormatRate(a.shape.BackwardFlops() / std::max(a.forward_backward_s - a.forward_s, 1e-12), "FLOP/s");
}

void MeasureMemoryAndLaunch(const c10::Device& device, double copy_bytes, double add_bytes, int kernels,
                            const TimingBudget& budget, ProfileMeasurements& m, ProfileProgress& progress,
                            size_t& stage) {
  progress.Begin(stage);
  m.copy = MeasureCopy(device, copy_bytes, budget);
  m.add = MeasureAdd(device, add_bytes, budget);
  progress.End("copy " + FormatRate(m.copy.BytesPerSecond(), "B/s") + ", add " + FormatRate(m.add.BytesPerSecond(), "B/s"));
  progress.Begin(++stage);
  m.launch = MeasureLaunch(device, kernels);
  char note[96];
  std::snprintf(note, sizeof note, "%.2f us to issue, %.2f us on the device", m.launch.host_s * 1e6, m.launch.device_s * 1e6);
  progress.End(note);
}

// Parameters per CPU AdamW update the profile times.
int64_t AdamParams(bool quick) { return int64_t{quick ? 8 : 64} << 20; }

void MeasureAdam(const HostInfo& host, int workers, bool quick, ProfileMeasurements& m, ProfileProgress& progress,
                 size_t stage) {
  progress.Begin(stage);
  m.cpu_adamw = MeasureCpuAdamW(AdamParams(quick), host.threads, workers, quick ? 2 : 3);
  std::string note = FormatRate(static_cast<double>(m.cpu_adamw.params) / m.cpu_adamw.seconds, "params/s") + " alone";
  if (workers > 1)
    note += ", " + FormatRate(static_cast<double>(m.cpu_adamw.params_each) / m.cpu_adamw.concurrent_seconds, "params/s") +
            " each with " + std::to_string(workers) + " at once";
  progress.End(note);
}

// The CPU executor computes in the plan's dtype, bf16 unless --dtype fp32:
// the fit is bf16's, fp32 goes in the table.
void MeasureCpu(const HostInfo& host, bool quick, ProfileMeasurements& m, std::ostream& out, bool terminal) {
  const c10::Device device(c10::kCPU);
  const TimingBudget budget = Budget(quick, false);
  const std::vector<GemmShape> gemms = ProfileGemmShapes(false, quick), fp32 = CpuFp32GemmShapes(quick);
  const std::vector<AttentionShape> attention = ProfileAttentionShapes(false, quick);
  // Past the last-level cache, so the rate is memory's.
  const double copy_bytes = 256 * kMiB, add_bytes = 64 * kMiB;
  const int kernels = quick ? 500 : 2000;
  const double scale = quick ? 0.15 : 1;
  ProfileProgress progress(out, terminal,
                           {{"bf16 GEMMs (at::linear, plans' compute dtype): " + std::to_string(gemms.size()) +
                                 " shapes of tiny-llama, small-llama and squares",
                             8 * scale},
                            {"fp32 GEMMs, for the table: " + std::to_string(fp32.size()) + " squares", 4 * scale},
                            {"attention forward and backward (the CPU executor's path), bf16: seq " + Span(attention),
                             8 * scale},
                            {"memory bandwidth: copy_ of " + FormatBytes(copy_bytes) + ", add of 3 x " + FormatBytes(add_bytes),
                             1},
                            {"op overhead: " + std::to_string(kernels) + " one-element add_", 0.2},
                            {"CPU AdamW: " + std::to_string(quick ? 8 : 64) + " Mi parameters on " +
                                 std::to_string(host.threads) + " threads",
                             quick ? 0.3 : 2.0}});
  size_t stage = 0;
  progress.Begin(stage);
  m.gemms = MeasureGemms(device, c10::kBFloat16, gemms, budget, [&](int d, int t) { progress.Items(d, t); });
  progress.End(GemmNote(m.gemms));
  progress.Begin(++stage);
  m.cpu_fp32_gemms = MeasureGemms(device, c10::kFloat, fp32, budget, [&](int d, int t) { progress.Items(d, t); });
  progress.End(GemmNote(m.cpu_fp32_gemms));
  progress.Begin(++stage);
  m.attention = MeasureAttention(device, c10::kBFloat16, attention, budget, [&](int d, int t) { progress.Items(d, t); });
  progress.End(AttentionNote(m.attention));
  MeasureMemoryAndLaunch(device, copy_bytes, add_bytes, kernels, budget, m, progress, ++stage);
  MeasureAdam(host, 1, quick, m, progress, ++stage);
  m.skipped.push_back("collectives (the CPU executor's Gloo over loopback is not measured; the base's curves stand)");
  m.skipped.push_back("host copies (no device: the base's figures stand)");
}

#ifdef LLMPLAN_WITH_CUDA
void FailContention(const std::string& why, ProfileMeasurements& m, ProfileProgress& progress) {
  m.contention.reset();
  m.skipped.push_back("collectives and compute beside each other (" + why + "; the base's slowdowns stand)");
  progress.End("failed: " + why);
}

void MeasureCuda(const HostInfo& host, const CudaMachine& machine, int collective_gpus, bool quick,
                 ProfileMeasurements& m, std::ostream& out, bool terminal) {
  const c10::Device device(c10::kCUDA, 0);
  const TimingBudget budget = Budget(quick, true);
  const std::vector<GemmShape> gemms = ProfileGemmShapes(true, quick);
  const std::vector<AttentionShape> attention = ProfileAttentionShapes(true, quick);
  const double copy_bytes = (quick ? 256 : 1024) * kMiB, add_bytes = 64 * kMiB, pinned_bytes = (quick ? 256 : 1024) * kMiB;
  const double beside_bytes = (quick ? 64 : 256) * kMiB;  // per copy beside the CPU AdamW
  const int kernels = quick ? 500 : 2000;
  const int gpus = static_cast<int>(machine.devices.size());
  const std::vector<double> sizes = quick ? std::vector<double>{1 * kMiB, 16 * kMiB, 256 * kMiB}
                                          : std::vector<double>{1 * kMiB,  4 * kMiB,   16 * kMiB,
                                                                64 * kMiB, 256 * kMiB, 1024 * kMiB};
  std::vector<std::vector<int>> groups;
  if (collective_gpus >= 2) {
    std::vector<int> all;
    for (int i = 0; i < collective_gpus; ++i) all.push_back(i);
    groups.push_back(all);
    if (collective_gpus > 2) groups.push_back({0, 1});
  }
  const double scale = quick ? 0.15 : 1;
  std::vector<ProfileProgress::Stage> stages = {
      {"bf16 GEMMs (at::linear) of the model projections: " + std::to_string(gemms.size()) +
           " shapes, and the cuBLAS workspaces",
       25 * scale},
      {"attention (SDPA causal, GQA 32/8, head_dim 128) forward and backward: seq " + Span(attention), 5 * scale},
      {"memory bandwidth: copy_ of " + FormatBytes(copy_bytes) + ", add of 3 x " + FormatBytes(add_bytes), 1},
      {"kernel launch: " + std::to_string(kernels) + " one-element add_", 1},
      {"pinned host<->device copies of " + FormatBytes(pinned_bytes) + ", each way and both at once; fixed memory", 3},
      {"CPU AdamW: " + std::to_string(quick ? 8 : 64) + " Mi parameters alone and on each of " + std::to_string(gpus) +
           " GPUs' share of " + std::to_string(host.threads) + " threads",
       5 * scale},
      {"CPU AdamW beside pinned copies of " + FormatBytes(beside_bytes) + " both ways", quick ? 0.3 : 1.0}};
  for (const std::vector<int>& g : groups)
    stages.push_back({"NCCL all-gather, reduce-scatter, all-reduce among " + std::to_string(g.size()) + " GPUs, bf16, " +
                          FormatBytes(sizes.front()) + " to " + FormatBytes(sizes.back()),
                      quick ? 3.0 : 8.0});
  // Collectives and compute beside each other, among all GPUs: sizes a
  // step's gathers and reduce-scatters have (a Llama-3-8B block's bf16
  // parameters are 436 MiB).
  const std::vector<double> contention_sizes = quick ? std::vector<double>{64 * kMiB, 256 * kMiB}
                                                     : std::vector<double>{16 * kMiB, 64 * kMiB, 256 * kMiB, 1024 * kMiB};
  const double contention_gather = 256 * kMiB;
  if (!groups.empty())
    stages.push_back({"NCCL beside compute among " + std::to_string(groups.front().size()) +
                          " GPUs: all-gather, reduce-scatter, all-reduce of " + FormatBytes(contention_sizes.front()) +
                          " to " + FormatBytes(contention_sizes.back()) +
                          " alone and beside a Llama-3-8B block's GEMMs (8192 tokens); the GEMMs alone and beside " +
                          FormatBytes(contention_gather) + " all-gathers",
                      quick ? 3.0 : 12.0});
  ProfileProgress progress(out, terminal, stages);
  size_t stage = 0;

  FixedMemoryMeasurement fixed;
  const auto [free_at_start, total] = DeviceMemory(0);
  fixed.capacity_bytes = total;
  fixed.used_after_context_bytes = total - free_at_start;
  progress.Begin(stage);
  fixed.workspace_bytes = MeasureGemmWorkspaceBytes(device);  // before any other GEMM
  m.gemms = MeasureGemms(device, c10::kBFloat16, gemms, budget, [&](int d, int t) { progress.Items(d, t); });
  progress.End(GemmNote(m.gemms) + "; workspaces " + FormatBytes(fixed.workspace_bytes));
  progress.Begin(++stage);
  m.attention = MeasureAttention(device, c10::kBFloat16, attention, budget, [&](int d, int t) { progress.Items(d, t); });
  progress.End(AttentionNote(m.attention));
  MeasureMemoryAndLaunch(device, copy_bytes, add_bytes, kernels, budget, m, progress, ++stage);

  progress.Begin(++stage);
  std::string note;
  try {
    m.host_copies = MeasurePinnedCopies(0, pinned_bytes, quick ? 2 : 5);
    note = FormatRate(m.host_copies->bytes / m.host_copies->host_to_device_s, "B/s") + " to the device, " +
           FormatRate(m.host_copies->bytes / m.host_copies->device_to_host_s, "B/s") + " back";
  } catch (const std::runtime_error& e) {
    m.skipped.push_back(std::string("pinned copies (") + e.what() + ")");
    note = "failed: " + std::string(e.what());
  }
  // Every compute kernel has loaded and the copy buffers are freed: what is
  // in use now beyond the caching allocator's reserve is the context's.
  const auto [free_after_compute, unused_total] = DeviceMemory(0);
  (void)unused_total;
  fixed.used_after_compute_bytes = total - free_after_compute;
  fixed.reserved_after_compute_bytes = AllocatorReservedBytes(device);
  m.fixed_memory = fixed;
  progress.End(note + "; context and kernels " +
               FormatBytes(fixed.used_after_compute_bytes - fixed.reserved_after_compute_bytes));

  MeasureAdam(host, gpus, quick, m, progress, ++stage);
  progress.Begin(++stage);
  try {
    m.cpu_adamw_beside_copies =
        MeasureCpuAdamWBesideCopies(0, AdamParams(quick), host.threads, beside_bytes, quick ? 2 : 3);
    char beside[96];
    std::snprintf(beside, sizeof beside, "x%.2f its time alone",
                  m.cpu_adamw_beside_copies->beside_copies_s / m.cpu_adamw_beside_copies->alone_s);
    progress.End(beside);
  } catch (const std::runtime_error& e) {
    m.skipped.push_back(std::string("CPU AdamW beside pinned copies (") + e.what() + ")");
    progress.End(std::string("failed: ") + e.what());
  }

  for (const std::vector<int>& group : groups) {
    progress.Begin(++stage);
    try {
      m.collectives.push_back(MeasureCollectives(group, sizes, quick ? 2 : 5, quick ? 5 : 20,
                                                 [&](int d, int t) { progress.Items(d, t); }));
      const CollectiveMeasurement& c = m.collectives.back();
      const auto& [bytes, seconds] = c.all_reduce.back();
      const double bus = bytes * 2.0 * (c.group_size - 1) / c.group_size / seconds;
      progress.End("all-reduce of " + FormatBytes(bytes) + " at " + FormatRate(bus, "B/s") + " bus bandwidth; communicator " +
                   FormatBytes(c.communicator_bytes));
    } catch (const std::runtime_error& e) {
      m.skipped.push_back("collectives among " + std::to_string(group.size()) + " GPUs (" + e.what() + ")");
      progress.End(std::string("failed: ") + e.what());
    }
  }
  if (!groups.empty()) {
    progress.Begin(++stage);
    try {
      m.contention = MeasureContention(groups.front(), contention_sizes, contention_gather, quick ? 3 : 5,
                                       quick ? 0.01 : 0.03, [&](int d, int t) { progress.Items(d, t); });
      std::vector<double> ratios;
      for (const ContentionPoint& p : m.contention->collectives)
        if (p.beside_compute_s > 0 && p.alone_s > 0) ratios.push_back(p.beside_compute_s / p.alone_s);
      if (ratios.empty()) throw std::runtime_error("no collective was covered by the GEMMs");
      std::sort(ratios.begin(), ratios.end());
      char note[160];
      std::snprintf(note, sizeof note, "collectives x%.2f-x%.2f beside GEMMs, GEMMs x%.2f beside all-gathers",
                    ratios.front(), ratios.back(),
                    m.contention->gemm_loop_beside_gathers_s / m.contention->gemm_loop_alone_s);
      progress.End(note);
    } catch (const c10::Error& e) {  // LibTorch: out of memory
      FailContention(e.what_without_backtrace(), m, progress);
    } catch (const std::runtime_error& e) {  // CUDA, NCCL, or the cover never held
      FailContention(e.what(), m, progress);
    }
  }
  // Every pair's link, for the islands (gpu_islands.h); a failed pair is its error, not an exception.
  for (int a = 0; a + 1 < collective_gpus; ++a)
    for (int b = a + 1; b < collective_gpus; ++b) m.peer_links.push_back(MeasurePeerLink(a, b, 64 * kMiB, quick ? 2 : 3));
  if (collective_gpus < 2) m.skipped.push_back("collectives (one GPU: the base's curves stand)");
}
#endif

}  // namespace

AssembledProfile RunProfile(const ProfileOptions& options, std::ostream& out, bool terminal) {
  const auto start = std::chrono::steady_clock::now();
  CheckOutputPath(options.output_path);
  if (std::error_code ec; !options.nvme_dir.empty() && !std::filesystem::is_directory(options.nvme_dir, ec))
    throw UserError("--nvme-dir " + options.nvme_dir + " is not a directory");
  if (options.gpus < 0) throw UserError("--gpus must be at least 1");
  const HostInfo host = ReadHostInfo();

  ProfileMeasurements m;
  m.quick = options.quick;
  ProfiledMachine& machine = m.machine;
  machine.host = host.host_name;
  machine.host_cores = host.threads;
  machine.host_memory_bytes = host.memory_bytes;
  machine.torch = TorchVersion();
  machine.llmplan = options.llmplan_version;
  machine.date_utc = UtcNow();

  // Which device: the GPUs unless --cpu, this build has no CUDA, or none is usable.
  std::string why_cpu = options.cpu ? "--cpu" : "this llmplan was built without CUDA";
  int visible = 0;
#ifdef LLMPLAN_WITH_CUDA
  CudaMachine cuda_machine;
  if (!options.cpu) {
    KeepNvlinkMulticastOff();
    cuda_machine = ProbeCudaMachine();
    visible = static_cast<int>(cuda_machine.devices.size());
    why_cpu = cuda_machine.error;
  }
#endif
  const bool cuda = visible > 0;
  if (options.gpus > 0 && !cuda) throw UserError("--gpus " + std::to_string(options.gpus) + ": no GPU to measure (" + why_cpu + ")");
  if (options.gpus > visible)
    throw UserError("--gpus " + std::to_string(options.gpus) + ": only " + std::to_string(visible) + " GPUs are visible");
  machine.device_kind = cuda ? "cuda" : "cpu";
#ifdef LLMPLAN_WITH_CUDA
  if (cuda) {
    machine.device_name = cuda_machine.devices.front().name;
    machine.gpus = visible;
    machine.driver = cuda_machine.driver_release;
    machine.cuda_runtime = CudaVersionString(cuda_machine.runtime_version);
    machine.nccl = NcclVersionString(cuda_machine.nccl_loaded);
  }
#endif
  if (!cuda) {
    machine.device_name = host.cpu_model;
    // The threads LibTorch's GEMMs use, at what their SIMD units can do.
    const int threads = TorchCpuThreads();
    machine.cpu_peak_flops = threads * host.bf16_flops_per_cycle * host.clock_hz;
    char how[160];
    std::snprintf(how, sizeof how, "estimated: %d LibTorch thread%s x %d bf16 FLOPs/cycle (%s) x %.2f GHz", threads,
                  threads == 1 ? "" : "s", host.bf16_flops_per_cycle, host.simd.c_str(), host.clock_hz / 1e9);
    machine.cpu_peak_how = how;
  }

  const std::string base_name =
      options.base.empty() ? DefaultBaseProfile(machine.device_kind, machine.device_name, BuiltinProfileNames()) : options.base;
  const HardwareProfile base = LoadHardwareProfile(base_name);
  if (base.device_kind != machine.device_kind)
    throw UserError("--base " + base_name + " is a " + base.device_kind + " profile, but this measures the " +
                    machine.device_kind + (cuda ? " GPUs" : " executor") + "; give a " + machine.device_kind + " profile");
  const std::string name =
      options.name.empty() ? std::filesystem::path(options.output_path).stem().string() : options.name;

  if (cuda) {
    out << "llmplan profile: " << visible << " x " << machine.device_name << " (driver " << machine.driver << ", NCCL "
        << machine.nccl << ", LibTorch " << machine.torch << "), base profile " << base.name << "\n";
#ifdef LLMPLAN_WITH_CUDA
    MeasureCuda(host, cuda_machine, options.gpus > 0 ? options.gpus : visible, options.quick, m, out, terminal);
#endif
  } else {
    out << "llmplan profile: the CPU executor on " << machine.device_name << ", " << host.threads << " threads ("
        << (why_cpu.empty() ? "no GPU" : why_cpu) << "), base profile " << base.name << "\n";
    MeasureCpu(host, options.quick, m, out, terminal);
  }
  if (!options.nvme_dir.empty()) {
    const int64_t bytes = int64_t{options.quick ? 1 : 4} << 30;
    ProfileProgress disk(out, terminal,
                         {{"NVMe: " + FormatBytes(static_cast<double>(bytes)) + " written and read back in " +
                               FormatBytes(static_cast<double>(NvmeBlockBytes(kNvmeBlockElements))) + " blocks, " +
                               options.nvme_dir,
                           options.quick ? 2.0 : 8.0}});
    disk.Begin(0);
    m.disk = MeasureDisk(options.nvme_dir, bytes, [&](int d, int t) { disk.Items(d, t); });
    const double gib = static_cast<double>(m.disk->bytes);
    disk.End("write " + FormatRate(gib / m.disk->write_seconds, "B/s") + ", read " +
             FormatRate(gib / m.disk->read_seconds, "B/s") +
             (m.disk->direct ? "" : " (buffered: this filesystem refuses O_DIRECT, so these are the page cache's)"));
  }
  m.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  AssembledProfile assembled = AssembleProfile(m, base, name);
  WriteFileAtomically(options.output_path, ProfileFileJson(assembled).dump(2) + "\n", "profile");
  out << "llmplan profile: wrote " << options.output_path << " in " << ProfileProgress::Duration(m.wall_seconds) << "\n";
  return assembled;
}

}  // namespace llmplan::executor
