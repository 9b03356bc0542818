// ProfileMeasurements: what `llmplan profile` measured on one machine, raw —
// the tables a hardware profile's numbers are fitted from. Filled by the
// profiler (profiler.h); turned into a profile by AssembleProfile
// (profile_assembly.h), which also writes these tables into the profile's
// `measurements` object. Plain data: no LibTorch, no CUDA.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "executor/doctor/peer_links.h"
#include "executor/profile/profile_shapes.h"

namespace llmplan::executor {

// Where the measurements were taken.
struct ProfiledMachine {
  std::string device_kind;  // "cuda" or "cpu"
  std::string device_name;  // "NVIDIA H200", or the CPU's model name
  int gpus = 0;             // CUDA GPUs visible on this host (0 on the CPU)
  std::string driver;       // NVIDIA driver release, e.g. "580.65.06"
  std::string cuda_runtime;  // e.g. "13.0"
  std::string nccl;          // the NCCL library loaded, e.g. "2.28.9"
  std::string torch;         // LibTorch
  std::string llmplan;       // llmplan's version and commit
  std::string host;          // host name
  int host_cores = 0;        // hardware threads
  double host_memory_bytes = 0;
  // CPU only: an estimate of the bf16 peak of the threads LibTorch uses (the
  // MFU denominator of a CPU profile) and how it was estimated.
  double cpu_peak_flops = 0;
  std::string cpu_peak_how;
  std::string date_utc;  // ISO 8601, when the measurement started
};

// How MeasureGemms times each shape for the fit on a GPU: 5 bursts of ~10 ms,
// each after 20 ms idle (BurstSecondsPerCall, device_timer.h).
inline constexpr double kGemmBurstSeconds = 0.01;
inline constexpr int kGemmBursts = 5;
inline constexpr double kGemmIdleSeconds = 0.02;

struct GemmMeasurement {
  GemmShape shape;
  std::string dtype;  // "bf16" or "fp32"
  double seconds = 0;  // per call, what the fit reads: on a GPU in bursts between idle (BurstSecondsPerCall)
  double sustained_seconds = 0;  // per call, back to back for SecondsPerCall's batches (0: not timed)
  double FlopsPerSecond() const { return shape.Flops() / seconds; }
};

struct AttentionMeasurement {
  AttentionShape shape;
  std::string dtype;
  std::string backend;  // the SDPA kernel that ran ("cudnn", "flash", ... "plain" on LibTorch 1.x)
  double forward_s = 0;
  double forward_backward_s = 0;
};

// A memory-bound kernel: bytes read + written, seconds per call.
struct BandwidthMeasurement {
  std::string what;
  double bytes = 0;
  double seconds = 0;
  double BytesPerSecond() const { return bytes / seconds; }
};

struct LaunchMeasurement {
  int kernels = 0;              // tiny ops issued per measurement
  double host_s = 0;            // host seconds to issue one
  double device_s = 0;          // device seconds per op, queued back to back
  int device_round = 0;         // ops per timed round on the device (0: all at once, a CPU)
  double graph_device_s = 0;    // the same ops replayed from a CUDA graph (0: not measured, no CUDA)
};

struct HostCopyMeasurement {
  double bytes = 0;  // per copy, pinned host memory
  double host_to_device_s = 0, device_to_host_s = 0;        // each direction alone
  double both_host_to_device_s = 0, both_device_to_host_s = 0;  // both at once, on two streams
};

// One collective curve set among `group_size` GPUs of this host: per op,
// (full buffer bytes, seconds) sorted by bytes.
struct CollectiveMeasurement {
  int group_size = 0;
  std::vector<std::pair<double, double>> all_gather, reduce_scatter, all_reduce;
  // Device memory one communicator took on the first GPU after every size of
  // every op had run (NCCL connects channels lazily, per algorithm).
  double communicator_bytes = 0;
};

// Collectives and compute sharing the GPUs (CUDA, 2+ GPUs): NCCL's kernels
// and the GEMMs take SMs and HBM bandwidth from each other, which neither
// the curves (collectives alone) nor the GEMM table (GEMMs alone) see.
// Times are medians of several repetitions, on the slowest GPU.
struct ContentionPoint {
  std::string op;               // "all_gather", "reduce_scatter", "all_reduce"
  double bytes = 0;             // full (unsharded) buffer
  double alone_s = 0;           // per call, back to back on the NCCL stream
  double beside_compute_s = 0;  // per call, while every GPU loops the block's GEMMs
};

struct ContentionMeasurement {
  int group_size = 0;
  std::vector<GemmShape> block_gemms;  // one pass of the compute loop, in call order
  double gemm_loop_alone_s = 0;        // seconds per pass
  double gemm_loop_beside_gathers_s = 0;  // per pass, while all-gathers of gather_bytes run back to back
  double gather_bytes = 0;
  std::vector<ContentionPoint> collectives;
};

struct CpuAdamWMeasurement {
  int64_t params = 0;  // elements per update, alone
  int threads = 0;     // alone: all of the host's hardware threads
  double seconds = 0;  // per update, alone
  // Every GPU's share of the host at once, as when every GPU of the node
  // offloads: `workers` updates of `params_each` elements at the same time,
  // threads / workers threads each; seconds until all are done.
  int workers = 1;
  int64_t params_each = 0;
  double concurrent_seconds = 0;
};

// The CPU AdamW beside pinned copies (CUDA, cpu_adamw_copies.h): the update
// of `params` elements on `threads` threads alone and while copies of
// `copy_bytes` run back to back both ways (device to host and host to
// device, a stream each), as the offloaded optimizer's gradient and
// parameter copies run beside its host update; medians of the repetitions.
struct CpuAdamWCopiesMeasurement {
  int64_t params = 0;
  int threads = 0;
  double copy_bytes = 0;       // per copy, each way, pinned host memory
  double alone_s = 0;          // per update
  double beside_copies_s = 0;  // per update, the copies running for all of it
  // The other way round: one copy each way at once (both streams), alone
  // and while updates ran back to back beside it; medians. 0: not measured.
  double copies_alone_s = 0;
  double copies_beside_update_s = 0;
};

// The local SSD, as NVMe offload streams it (executor/profile/disk_rate.h).
struct DiskMeasurement {
  std::string dir;          // --nvme-dir
  bool direct = true;       // O_DIRECT; false: the filesystem refused it (the rates are the page cache's)
  int64_t bytes = 0;        // written, then read back
  int64_t block_bytes = 0;  // per transfer
  double write_seconds = 0;  // including the final flush
  double read_seconds = 0;
};

// Device memory outside what tensors hold (CUDA only).
struct FixedMemoryMeasurement {
  double capacity_bytes = 0;              // cudaMemGetInfo's total
  double used_after_context_bytes = 0;    // total - free once the CUDA context exists
  double used_after_compute_bytes = 0;    // total - free after the GEMMs, attention and copies ran
  double reserved_after_compute_bytes = 0;  // the caching allocator's reserved bytes then
  double workspace_bytes = 0;             // allocated by the first GEMMs beyond their outputs
};

struct ProfileMeasurements {
  ProfiledMachine machine;
  bool quick = false;
  double wall_seconds = 0;

  std::vector<GemmMeasurement> gemms;           // bf16: the fit's
  std::vector<GemmMeasurement> cpu_fp32_gemms;  // CPU only, for the table
  std::vector<AttentionMeasurement> attention;
  BandwidthMeasurement copy, add;
  LaunchMeasurement launch;
  std::optional<HostCopyMeasurement> host_copies;      // CUDA only
  std::vector<CollectiveMeasurement> collectives;      // CUDA, 2+ GPUs; the first among all GPUs measured
  std::optional<ContentionMeasurement> contention;     // CUDA, 2+ GPUs: among all GPUs measured
  std::vector<PeerLink> peer_links;                    // CUDA, 2+ GPUs: every pair of the GPUs measured
  CpuAdamWMeasurement cpu_adamw;
  std::optional<CpuAdamWCopiesMeasurement> cpu_adamw_beside_copies;  // CUDA only
  std::optional<DiskMeasurement> disk;                 // with --nvme-dir
  std::optional<FixedMemoryMeasurement> fixed_memory;  // CUDA only
  // What could not be measured and why ("pinned copies: cudaHostAlloc failed ...").
  std::vector<std::string> skipped;
};

}  // namespace llmplan::executor
