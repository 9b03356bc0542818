// HardwareProfile: what one kind of accelerator (or the CPU) can do, as the
// cost and memory models need it. Loaded from profiles/<name>.json; each file
// says in "source" whether its numbers were measured (where, when, how) or
// derived from a datasheet. The schema is documented in profiles/README.md.
//
// All rates are *achieved* rates, not peaks, except bf16_peak_flops which is the
// datasheet peak that MFU is quoted against.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmplan {

enum class CollectiveOp { kAllGather, kReduceScatter, kAllReduce };
std::string CollectiveOpName(CollectiveOp op);

// Measured times of one collective at one group size, on one kind of link.
// Other group sizes follow the ring model: the bytes each GPU moves grow as
// (n-1)/n (2(n-1)/n for all-reduce) and latency grows with the ring's hops.
struct CollectiveCurve {
  int measured_group_size = 2;
  // (buffer bytes = the full, unsharded buffer; seconds), sorted by bytes.
  std::vector<std::pair<double, double>> points;
  double hop_latency_s = 5e-6;  // added per extra ring hop beyond the measured group
};

struct LinkCollectives {
  CollectiveCurve all_gather, reduce_scatter, all_reduce;
  const CollectiveCurve& For(CollectiveOp op) const;
};

struct HardwareProfile {
  std::string name;
  std::string source;       // "measured ..." or "datasheet ..."
  std::string device_kind;  // "cuda" or "cpu"

  // --- device memory ---
  double memory_bytes = 0;             // what the device reports
  double cuda_context_bytes = 0;       // CUDA context + kernels, outside the caching allocator
  double workspace_bytes = 0;          // cuBLAS/cuDNN workspaces
  double collective_buffer_bytes = 0;  // NCCL channel buffers per communicator
  // Fraction of memory_bytes the planner lets a plan reserve (headroom for spikes).
  double usable_fraction = 0.95;
  // The spread of the memory prediction's error that calibration measured
  // (llmplan calibrate): a plan fits only with this fraction of its
  // predicted peak to spare. 0 until calibrated.
  double memory_margin_fraction = 0;

  // --- compute ---
  double bf16_peak_flops = 0;     // datasheet dense bf16 (MFU denominator)
  double gemm_max_efficiency = 0.8;  // achieved/peak for very large GEMMs
  // GEMM efficiency = max * d/(d + half), d = the smallest of m, n, k.
  double gemm_half_efficiency_dim = 300;
  // Causal attention, FLOPs counted with the causal half removed
  // (forward 2*b*s^2*h*d... see cost_model.cc); backward does 2.5x forward's FLOPs.
  // Measured at attention_reference_head_dim (128 on GPUs: the Llama-3 heads).
  double attention_forward_flops_per_s = 0;
  double attention_backward_flops_per_s = 0;
  int attention_reference_head_dim = 0;  // 0: every width runs at the rates above
  // Heads of other widths, as fractions of those rates. FlashAttention tiles
  // the sequence by 64-128 rows and loops over head_dim inside a tile, so a
  // 64-wide head (SmolLM2, Qwen2.5-0.5B) does half the tensor-core work per
  // K/V tile loaded and per softmax pass: on one H200 its backward ran at
  // about two thirds of the 128-wide rate. llmplan profile measures each
  // width it lists; a width not listed runs at the reference rates.
  struct AttentionWidth {
    int head_dim = 0;
    double forward_fraction = 1, backward_fraction = 1;
  };
  std::vector<AttentionWidth> attention_widths;
  // And sequences of other lengths. A causal FlashAttention kernel does fixed
  // work per query tile — the half-masked diagonal tile, loading Q, the
  // softmax epilogue, writing O (and dQ's fp32 accumulator backward) — which
  // spreads over the s/tile key tiles it loops across, so the rate follows
  // s / (s + half): on one H100 the 128-wide backward ran at 275 TFLOP/s at
  // 1,024 tokens and 496 at 8,192, the 64-wide one at 205 and 387. The rates
  // above are those at attention_reference_seq; the half-rate sequences, one
  // per direction and shared by the widths, are where a direction runs at
  // half its long-sequence rate (llmplan profile fits them: attention_rate_fit.h).
  // 0: not measured (every sequence at the rates above).
  int attention_reference_seq = 0;
  double attention_forward_half_rate_seq = 0;
  double attention_backward_half_rate_seq = 0;
  // Causal attention FLOPs per second for heads `head_dim` wide (0: the
  // reference) over sequences of `seq` tokens (0: the reference sequence).
  double AttentionFlopsPerSecond(bool backward, int head_dim, double seq = 0) const;
  double memory_bandwidth_bytes_per_s = 0;  // achieved, read+write
  double elementwise_efficiency = 0.7;      // fraction of memory bandwidth elementwise kernels reach
  double kernel_launch_s = 4e-6;            // host cost of issuing one kernel (the host runs ahead unless work is tiny)
  double kernel_overhead_s = 0;             // device time each kernel adds beyond its work (launch latency, tail)
  // The same inside a CUDA graph (Plan::cuda_graph), where the device takes
  // each kernel from the graph instead of the host's queue; JSON
  // "graph_kernel_overhead_s", measured by llmplan profile. 0: not measured
  // (a captured kernel is priced as kernel_overhead_s, and the plan search
  // does not try the graph: all it could predict is the host's launches).
  double graph_kernel_overhead_s = 0;
  double GraphKernelOverheadSeconds() const { return graph_kernel_overhead_s > 0 ? graph_kernel_overhead_s : kernel_overhead_s; }
  // Kernels the host may have issued and not yet finished before a launch
  // blocks (CUDA's launch queue); it bounds how far the host runs ahead.
  int launch_queue_depth = 1024;
  // Compute slows by this fraction while a collective runs beside it (SMs and
  // HBM shared with NCCL's kernels). llmplan profile measures it (a loop of
  // a block's GEMMs beside back-to-back all-gathers); calibrate refits it
  // from multi-GPU runs.
  double compute_slowdown_during_collectives = 0.08;
  // And a collective slows by this fraction while compute runs beside it: its
  // kernels get fewer SM cycles and less HBM bandwidth beside GEMMs than in
  // the profile's collective loop (the curves below are measured alone). On
  // 2 x H200, gathers beside compute took 1.3-1.9x their curve, alone
  // 1.0-1.2x. llmplan profile measures it; calibrate keeps it, because in a
  // run's times it moves exactly as the curves' scales do. 0: not measured.
  double collective_slowdown_during_compute = 0;

  // --- host ---
  double host_memory_bytes = 0;
  double host_to_device_bytes_per_s = 0;  // pinned
  double device_to_host_bytes_per_s = 0;  // pinned
  // True when both copy directions share one link's bandwidth (e.g. PCIe
  // switch shared); false when they are full duplex.
  bool copies_share_link = false;
  // CPU AdamW (offload): the whole host's rate with every GPU's process
  // running at once, summed; a plan's processes on one node split it.
  double cpu_adam_params_per_s = 0;
  // One process alone on the host (a plan with one GPU per node). Not the
  // summed rate: on the H200 host one process on all 32 threads ran 4.48 G
  // params/s, two on 16 threads each 2 x 2.37 (llmplan profile measures both).
  double cpu_adam_alone_params_per_s = 0;
  // The CPU AdamW slows by this fraction while a pinned host<->device copy
  // runs beside it: the loop is bound by host memory bandwidth (30 bytes per
  // parameter) and the copy's DMA takes its share of it. On one H200 the
  // update took 1.11 s instead of 0.93 s with each unit's 53 GB/s gradient
  // copy beside it. llmplan profile measures it (the update
  // alone and beside continuous copies both ways); 0: not measured.
  double cpu_adam_slowdown_during_copies = 0;
  // And the other way: a pinned copy slows by this fraction while the CPU
  // AdamW runs beside it — the DMA engine waits on the same memory
  // controllers the update saturates (one H200: the parameters' upload ran
  // 20% longer beside the update than its alone rate said). llmplan profile
  // measures it (copies both ways alone, then beside back-to-back updates);
  // 0: not measured.
  double copy_slowdown_during_cpu_adam = 0;
  // Sequential read and write bandwidth of the node's local SSD, in large
  // aligned blocks that bypass the page cache (O_DIRECT), as NVMe offload
  // streams AdamW's state: llmplan profile --nvme-dir measures them. 0: not
  // measured (the planner then offers no NVMe offload).
  double nvme_read_bytes_per_s = 0;
  double nvme_write_bytes_per_s = 0;
  // Host time per step outside the step program: taking the step's batches
  // from the loader, the end-of-step synchronisation and logging.
  double step_overhead_s = 0;

  // --- topology ---
  int gpus_per_node = 8;
  // The node's GPUs that share a fast link (NVLink), by local index: a box
  // of two 4-GPU NVLink islands joined through PCIe or across CPU sockets is
  // {{0,1,2,3},{4,5,6,7}}. Empty: the whole node is one island (the
  // intra-node curves hold for any group in it). llmplan profile and doctor
  // find them from each pair's peer access and measured copy bandwidth.
  std::vector<std::vector<int>> islands;
  // The slowest measured pair bandwidth between GPUs of different islands
  // (bytes/s, one direction): what a ring through that link moves at most.
  double cross_island_bytes_per_s = 0;
  // Whether the local GPUs `local` (indices within a node) reach beyond one island.
  bool SpansIslands(const std::vector<int>& local) const;
  LinkCollectives intra_node;
  LinkCollectives inter_node;
  // NCCL variables measured to be faster on this machine than NCCL's own
  // choice (llmplan doctor --tune: the plan's collectives under each
  // NCCL_ALGO, NCCL_PROTO and channel count), which `llmplan run` sets unless
  // the user did: name -> value (NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS,
  // NCCL_MAX_NCHANNELS only), and how that was measured. Empty: NCCL decides.
  std::map<std::string, std::string> nccl_settings;
  std::string nccl_settings_source;

  double price_per_gpu_hour = 0;  // USD, for cost estimates; 0 = unknown

  // Seconds for `op` over a buffer of `bytes` (the full, unsharded size)
  // among `group_size` ranks. `spans_nodes` picks the inter-node curve.
  // REQUIRES: group_size >= 1. Returns 0 when group_size == 1.
  // `spans_islands` (within a node): the ring also crosses the link between
  // islands, and takes at least its traffic over cross_island_bytes_per_s.
  double CollectiveSeconds(CollectiveOp op, double bytes, int group_size, bool spans_nodes,
                           bool spans_islands = false) const;

  // Achieved FLOP/s of a bf16 GEMM of shape m x n x k.
  double GemmFlopsPerSecond(double m, double n, double k) const;

  // Device bytes a plan may use for the caching allocator's reserved memory.
  double AllocatorCapacityBytes() const;

  void Validate() const;  // throws UserError naming a bad field
};

// Directory of the built-in profiles (the source tree's profiles/, or
// $LLMPLAN_PROFILES when set).
std::string ProfilesDirectory();
std::vector<std::string> BuiltinProfileNames();

// `name_or_path` is a built-in profile name or a path to a profile JSON.
// Throws UserError for an unknown name, unreadable file or invalid field.
HardwareProfile LoadHardwareProfile(const std::string& name_or_path);
HardwareProfile HardwareProfileFromJson(const nlohmann::json& j, const std::string& context);
nlohmann::json HardwareProfileToJson(const HardwareProfile& p);

}  // namespace llmplan
