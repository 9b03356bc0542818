// Plan: every choice that fixes how one model trains on one set of GPUs —
// strategy, micro-batch, gradient accumulation, checkpointed layers, offload,
// GPU grouping, dtypes, and the optimizer's hyper-parameters. `llmplan
// estimate -o plan.json` writes it; `simulate` and `run` read it. A plan file
// carries its model spec and the name of its hardware profile, so it is
// self-contained.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/model_spec.h"

namespace llmplan {

enum class ShardingStrategy {
  kFullShard,    // ZeRO-3: params, grads, optimizer state sharded; gather before fwd and again before bwd
  kShardGradOp,  // ZeRO-2: gathered params kept from forward to backward
  kNoShard,      // DDP: full replicas, all-reduce gradients
  kHybridShard,  // full_shard inside a group of shard_group_size GPUs, all-reduce across groups
};

enum class Offload {
  kNone,
  kOptimizer,           // fp32 master weights' AdamW state (m, v) on the host; CPU AdamW
  kParams,              // fp32 master parameters on the host (no GPU copy between steps)
  kOptimizerAndParams,  // both: the GPU holds only bf16 compute copies in flight and gradients
};

// Where offloaded AdamW state lives. kNvme (ZeRO-Infinity's idea): m and v
// (8 bytes per parameter, half of what the optimizer offload puts on the
// host) in one file per rank on a local SSD, streamed through a few pinned
// blocks by the CPU AdamW (planner/nvme_offload.h has the numbers both sides
// use). The fp32 master and the gradient staging stay in host memory.
enum class OffloadTier { kHost, kNvme };

// How the offloaded optimizer's fp32 gradient shards come down to the host
// and its updated compute-dtype shards go up (planner/step_program.h,
// kOffloadStagingSlots; the executor's StepInterpreter allocates the same).
//   kUnit   a pinned fp32 gradient buffer and a pinned compute-dtype buffer
//           per unit (no compute-dtype one with the parameters streamed: the
//           update writes the unit's own host shard). Each gradient comes
//           down during the backward, as soon as its last reduction ends,
//           while the host is idle; the next step's host update then reads
//           only host memory. 6 bytes of pinned memory per parameter (4
//           with the parameters streamed).
//   kSlots  kOffloadStagingSlots pinned slots the size of the largest unit
//           for each direction: 12 bytes (8) per element of that unit's
//           shard. Each gradient comes down at the next step's start, beside
//           the host update of the unit before it, and that copy shares host
//           memory bandwidth with the update (the CPU AdamW took 19% longer:
//           Llama-3.2-3B on one H200; the profile's
//           cpu_adam_slowdown_during_copies prices it).
enum class OffloadStaging { kUnit, kSlots };

std::string StrategyName(ShardingStrategy s);  // "full_shard", ...
std::string OffloadName(Offload o);            // "none", "optimizer", "params", "optimizer+params"
// Throw UserError listing the accepted names.
ShardingStrategy ParseStrategy(const std::string& name);
Offload ParseOffload(const std::string& name);
bool OffloadsOptimizer(Offload o);
bool OffloadsParams(Offload o);
std::string OffloadTierName(OffloadTier t);  // "host", "nvme"
OffloadTier ParseOffloadTier(const std::string& name);  // throws UserError listing the names
std::string OffloadStagingName(OffloadStaging s);  // "unit", "slots"
OffloadStaging ParseOffloadStaging(const std::string& name);  // throws UserError listing the names

// How far attention reaches inside a micro-batch's window of seq_len tokens
// (executor/model/attention_layout.h).
//   kWindow     each row is one sequence: every token attends to all before it.
//   kDocuments  a packed window holds several documents (data/document_index.h):
//               each token attends only to its own document, and positions
//               restart at each document's first token.
enum class AttentionSpan { kWindow, kDocuments };
std::string AttentionSpanName(AttentionSpan a);  // "window", "documents"
AttentionSpan ParseAttentionSpan(const std::string& name);  // throws UserError listing the names

enum class DType { kBF16, kFP32 };
std::string DTypeName(DType d);  // "bf16", "fp32"
DType ParseDType(const std::string& name);
int DTypeBytes(DType d);

// The cross-entropy's chunk when a plan does not say (Plan::loss_chunk_tokens).
constexpr int64_t kDefaultLossChunkTokens = 1024;

struct OptimizerConfig {
  double lr = 3e-4;
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio
  int64_t warmup_steps = 100;
  int64_t decay_steps = 10000;  // length of the cosine, counted from step 0
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global-norm clipping; 0 disables
};

struct Plan {
  ModelSpec model;
  std::string profile = "h100-sxm-80g";  // a profile name or path

  // --- GPUs ---
  int gpus = 1;              // world size
  int gpus_per_node = 8;     // from the profile unless overridden
  int shard_group_size = 1;  // GPUs that share one copy of the state (= gpus for full_shard)
  // Host memory this job may pin on each node, in bytes; 0: the profile's
  // per-GPU figure for every GPU of the job on the node. Set it when the job
  // has a node to itself that is bigger than the profile says, e.g. one GPU
  // of a 2-GPU, 256 GiB host offloading an 8B model's optimizer.
  double host_memory_per_node_bytes = 0;

  // --- batch ---
  int64_t seq_len = 4096;
  int64_t micro_batch = 1;  // sequences per GPU per forward/backward
  int64_t grad_accum = 1;   // micro-batches per optimizer step
  // Sequences per optimizer step over all GPUs: micro_batch * grad_accum * data_parallel_size.
  int64_t GlobalBatch() const { return micro_batch * grad_accum * gpus; }
  int64_t TokensPerStep() const { return GlobalBatch() * seq_len; }

  // --- memory/time trade-offs ---
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  Offload offload = Offload::kNone;
  // Where the offloaded AdamW m and v live (JSON "offload_to", default
  // "host"); kNvme only with an offload that moves the optimizer.
  OffloadTier offload_to = OffloadTier::kHost;
  // Delayed parameter update (ZeRO-Offload's DPU), opt-in: with the
  // optimizer offloaded, step N's forward and backward run on the
  // parameters of step N - 2's update while the host applies step N - 1's
  // gradients beside them, unit by unit in backward order, each unit's new
  // parameters copied up once step N's backward is done with its old ones.
  // The CPU AdamW then hides under a whole forward and backward instead of
  // only the first forward, at the price of gradients one step stale (a
  // checkpoint finishes the pending update, so the step after it runs on
  // current parameters, resumed or not). JSON "delayed_update", default false.
  // REQUIRES (Validate): offload optimizer (not +params: their gathers read
  // the host shard the update writes), host tier, grad_accum 1 (a unit's old
  // gradient must be down before its first reduction and its new parameters
  // up after its last backward, through the two staging slots).
  bool delayed_update = false;
  // The offloaded optimizer's host staging (see OffloadStaging). JSON
  // "offload_staging", written only for a plan that offloads the optimizer
  // (it means nothing otherwise); absent: "slots", what the executor did for
  // every plan file written before the field existed. The search chooses
  // kUnit where the host has room for it. REQUIRES (Validate): kSlots with
  // delayed_update, whose copies run through the slots.
  OffloadStaging offload_staging = OffloadStaging::kSlots;
  std::vector<int> checkpoint_layers;  // sorted block indices recomputed in backward
  // Per-unit strategy: the embedding and the head (final norm + lm_head) kept
  // whole on every GPU — no gathers, their gradients all-reduced over the
  // job once per step — while the blocks follow `strategy`. What the
  // FSDP/ZeRO guides advise for a large vocabulary: those two units are the
  // largest gathers of a step (2 x vocab x hidden), run twice per
  // micro-batch, and cost their whole fp32 state in memory on every GPU
  // instead. REQUIRES (Validate): a sharded strategy with shard groups of
  // more than one GPU; not with offload optimizer+params (streamed
  // parameters need gathers).
  bool replicate_edges = false;
  // Each all-gather's input cast from the fp32 master shard when it is sent,
  // as FSDP2 does, instead of a compute-dtype copy of the shard that AdamW
  // writes and every gather of the step sends: 2 bytes a parameter of the
  // shard less on the device (7.48 GiB of an 8B model over two GPUs), for 6
  // bytes of HBM traffic a parameter per gather, on the gather's side
  // stream. JSON "cast_at_gather", written only when true (absent: false,
  // what every plan file before it did); the search tries it on plans that
  // need checkpointed blocks, or do not fit, without it and keeps it where it
  // is faster or the only one that fits. REQUIRES (Validate): offload none (an
  // offloaded optimizer's update arrives as the compute-dtype shard) and
  // shard groups of more than one GPU (one GPU's "gather" casts already).
  bool cast_at_gather = false;
  int prefetch_depth = 1;              // units gathered ahead of the one computing
  // RMSNorm, RoPE, SwiGLU and the cross-entropy's softmax as the executor's
  // fused CUDA kernels (one pass each, less saved for backward) rather than
  // LibTorch's composite ops. JSON "fused_kernels", default true; false
  // reproduces runs recorded before the kernels existed and gives the
  // side-by-side baseline. Only GPUs run the kernels: on a CPU, and for
  // shapes base/block_kernel_shapes.h excludes, planner and executor both
  // use the composite ops.
  bool fused_kernels = true;
  // The step's forward and backward captured once as a CUDA graph and
  // replayed every step after (StepProgram::cuda_graph): the host launches
  // one graph instead of ~1,700 kernels a step of a 135M model, and the gaps
  // between those kernels that the host's launches left shrink. The graph's
  // memory is a private pool of the caching allocator that nothing outside
  // it reuses (simulator/reserved_memory.h prices it). JSON "cuda_graph",
  // written only when true; `estimate --cuda-graph yes|no`, else the search
  // keeps it on a one-GPU plan where it is predicted faster and fits. A CPU
  // run runs the same program without a graph. REQUIRES (Validate): one GPU
  // (collectives are not captured), offload none, attention in the window,
  // every target trained (a loss mask's rows, and documents' layouts, change
  // shape from batch to batch; a graph replays one shape).
  bool cuda_graph = false;
  // Tokens per chunk of the chunked cross-entropy (the fp32 logits never
  // exist whole); JSON "loss_chunk_tokens", default kDefaultLossChunkTokens.
  int64_t loss_chunk_tokens = kDefaultLossChunkTokens;

  // --- attention ---
  // JSON "attention", default "window"; `llmplan run --attention documents`.
  AttentionSpan attention = AttentionSpan::kWindow;
  // With kDocuments: the attention kernel's work on the data's windows over
  // its work on whole windows: the mean over the windows of the causal
  // tiles inside their pieces over a whole window's (below 1 for all but
  // the shortest windows; above 1 where many pieces end in nearly empty
  // tiles)
  // (data/document_pieces.h DocumentAttentionWork, measured from the token
  // file's document index). Where attention runs under a mask (the CPU,
  // fp32) every tile is computed and the planner ignores it. JSON
  // "document_attention_work", written with kDocuments, default 1.
  double document_attention_work = 1.0;

  // --- the loss ---
  // The share of targets the loss trains: under a loss mask (data prepare
  // --chat writes one beside the token file) the head computes the logits of
  // the trained targets' rows only, so its GEMMs and its softmax shrink by
  // this much (the final norm does not). Measured from the data by estimate
  // --data and by run (data/loss_mask.h). JSON "trained_fraction", written
  // when below 1, default 1.
  double trained_fraction = 1.0;

  // --- dtypes ---
  DType param_dtype = DType::kBF16;   // compute copies
  DType reduce_dtype = DType::kFP32;  // gradient reduce-scatter / all-reduce
  // Master weights, gradients shards and AdamW state are always fp32.

  OptimizerConfig optimizer;
  uint64_t seed = 1234;

  bool IsCheckpointed(int layer) const;
  // The GPUs that share one copy of unit `unit`'s state (units in forward
  // order: 0 the embedding, 1..layers the blocks, layers + 1 the head):
  // shard_group_size, or 1 for an edge unit kept whole (replicate_edges).
  int UnitShardGroup(int unit) const;
  // The data-parallel copies of that unit's state: gpus / UnitShardGroup.
  int UnitReplicas(int unit) const { return gpus / UnitShardGroup(unit); }
  // Whether that unit's compute copy stays gathered for the whole run (no
  // gathers or releases): every unit under no_shard, an edge kept whole.
  bool UnitResident(int unit) const {
    return strategy == ShardingStrategy::kNoShard || (UnitShardGroup(unit) == 1 && shard_group_size > 1);
  }
  // AdamW's m and v in files on a local SSD (offload_to nvme).
  bool OptimizerStateOnNvme() const { return offload_to == OffloadTier::kNvme && OffloadsOptimizer(offload); }
  // The offloaded optimizer stages every unit on the host (offload_staging
  // unit): gradients copied down in the backward, not at the next step's start.
  bool StagesEveryUnit() const { return OffloadsOptimizer(offload) && offload_staging == OffloadStaging::kUnit; }
  // Number of data-parallel replicas of the model state: gpus / shard_group_size.
  int ReplicaGroups() const { return gpus / shard_group_size; }

  // GPUs of this job on one node: min(gpus, gpus_per_node).
  int GpusOnNode() const { return gpus < gpus_per_node ? gpus : gpus_per_node; }

  // REQUIRES: model is valid. Throws UserError naming the inconsistent field
  // (e.g. gpus not divisible by shard_group_size, a layer index out of range).
  void Validate() const;
};

// The most micro-batches one step of `model` may hold. A step program has a
// few ops per unit (embedding, blocks, head) per micro-batch, and simulating
// and replaying it costs about 7 KB and 15 us per unit and micro-batch
// (1.8 GB and 4.4 s for Llama-3-8B at grad_accum 8192): the limit, 2^18
// unit-passes per step (at most 65,536), keeps one plan under ~2 GB.
int64_t MaxGradAccum(const ModelSpec& model);

// Fills shard_group_size from the strategy: gpus for full_shard/shard_grad_op,
// 1 for no_shard; hybrid keeps its value (default gpus_per_node).
void NormaliseGrouping(Plan& plan);

// Parses "none", "all", or a list such as "0,3-5" against `layers` blocks.
// Throws UserError for out-of-range or malformed input.
std::vector<int> ParseLayerList(const std::string& text, int64_t layers);
std::string FormatLayerList(const std::vector<int>& layers);  // "0,3-5"

// One line for lists of plans: "full_shard, mb 2 x ga 4, ckpt 3/32, offload
// none" (", edges whole" with replicate_edges; a hybrid group in brackets).
std::string PlanSummary(const Plan& plan);

nlohmann::json PlanToJson(const Plan& plan);
Plan PlanFromJson(const nlohmann::json& j, const std::string& context);
Plan LoadPlan(const std::string& path);  // throws UserError
void SavePlan(const Plan& plan, const std::string& path);

}  // namespace llmplan
