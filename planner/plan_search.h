// PlanSearch: chooses the plan with the most tokens per second that fits in
// memory on every GPU and on the host, over strategy x micro-batch x gradient
// accumulation x checkpointed layers x offload x GPU grouping, for a target
// global batch. Any choice can be pinned; the search fills in the rest. It can
// also answer the reverse question: the fewest GPUs that fit (and reach a
// target time to train).
//
// The search never prices a plan itself: it asks a PlanEvaluator (in practice
// the simulator's EvaluatePlan), so what the search reports for a plan is what
// `llmplan simulate` says for it. How it searches: plan_search.cc.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/estimate.h"
#include "planner/hardware_profile.h"
#include "planner/plan.h"

namespace llmplan {

using PlanEvaluator = std::function<Estimate(const Plan&)>;

struct SearchRequest {
  ModelSpec model;
  std::string profile;  // name or path, recorded in the plan
  int gpus = 8;         // 0: find the fewest that fit (--gpus auto)
  int max_gpus = 16384;  // upper bound for --gpus auto
  int gpus_per_node = 0;  // 0: the profile's
  double host_memory_per_node_bytes = 0;  // 0: the profile's per GPU (Plan::host_memory_per_node_bytes)
  int64_t seq_len = 4096;
  // Sequences per optimizer step over all GPUs; 0: free (grad_accum 1, the
  // micro-batch with the most throughput).
  int64_t global_batch = 0;
  double train_tokens = 0;  // for time/cost to train; 0: 20 tokens per parameter (Chinchilla)
  double target_days = 0;   // with gpus = 0: also reach this time to train

  // Pins (unset: searched).
  std::optional<ShardingStrategy> strategy;
  std::optional<int> shard_group_size;
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> grad_accum;
  std::optional<std::vector<int>> checkpoint_layers;
  std::optional<Offload> offload;
  std::optional<bool> replicate_edges;  // Plan::replicate_edges
  // Where offloaded optimizer state lives. Unset: the host, and NVMe for a
  // plan whose host memory alone does not fit, when the profile has disk
  // rates. kNvme: only plans that offload the optimizer, all to NVMe.
  std::optional<OffloadTier> offload_to;
  // Allow the delayed parameter update (Plan::delayed_update) on every plan
  // that can take it (offload optimizer to the host, grad_accum 1). Off: it
  // changes the numerics, so only the user turns it on.
  bool delayed_update = false;
  // The offloaded optimizer's host staging (Plan::offload_staging). Unset:
  // per unit where the host has room for it (its copies run under the
  // backward, so it is never slower), else the slots; a delayed update
  // always uses the slots. Pinned: that form on every plan that offloads the
  // optimizer without a delayed update.
  std::optional<OffloadStaging> offload_staging;
  // Plan::cast_at_gather. Unset: tried on a plan that needs checkpointed
  // blocks (or does not fit) without it, and kept where it is faster (fewer
  // blocks recomputed) or the only one that fits. Pinned true: on every plan
  // that can take it (sharded, offload none).
  std::optional<bool> cast_at_gather;
  // Plan::cuda_graph. Unset: tried on the best plan of one GPU that can take
  // it, where the profile measured kernels replayed from a graph
  // (HardwareProfile::graph_kernel_overhead_s), and kept where it is
  // predicted faster and fits. Pinned true: on every plan that can take it
  // (one GPU, offload none).
  std::optional<bool> cuda_graph;

  OptimizerConfig optimizer;
  int prefetch_depth = 1;
  // Tokens per chunk of the cross-entropy (Plan::loss_chunk_tokens). Unset:
  // kDefaultLossChunkTokens, and a longer chunk tried on the best plan.
  std::optional<int64_t> loss_chunk_tokens;
  bool fused_kernels = true;  // Plan::fused_kernels
  AttentionSpan attention = AttentionSpan::kWindow;  // Plan::attention
  double document_attention_work = 1.0;              // Plan::document_attention_work
  double trained_fraction = 1.0;                     // Plan::trained_fraction
};

struct RankedAlternative {
  Estimate estimate;
  std::string reason;  // why it lost: "12% slower (...)" or the memory overflow
};

struct SearchResult {
  bool found = false;
  Estimate best;
  std::vector<RankedAlternative> alternatives;  // best few others, feasible first
  int evaluated = 0;                            // plans simulated
  double train_tokens = 0;
  double train_seconds = 0;  // time to train train_tokens with the best plan
  double train_cost = 0;     // USD, 0 when the profile has no price
  std::string why_none;      // when !found
};

// The most micro-batches per step the search tries when grad_accum is not
// pinned (a pinned one may go up to MaxGradAccum): each is simulated op by op,
// so the limit keeps any search to seconds. 481 for an 8B model of 32 blocks.
int64_t SearchGradAccumLimit(const ModelSpec& model);

// REQUIRES: request.model is valid. Throws UserError for contradictory pins
// (e.g. a global batch that is not a multiple of gpus x micro_batch), and for
// a global batch over gpus x micro-batch limit x grad-accum limit sequences.
SearchResult SearchPlans(const SearchRequest& request, const HardwareProfile& profile,
                         const PlanEvaluator& evaluate);

// --- Checkpointed-layer selection (the search's greedy order, exposed for tests) ---
// Per block: bytes kept until backward without / with checkpointing, and the
// seconds recompute costs.
struct LayerCheckpointCost {
  double full_bytes = 0;
  double checkpointed_bytes = 0;
  double recompute_seconds = 0;
};

// Peak activation bytes with `checkpointed` (one flag per block): the largest
// of the forward's end (all saved + `head_bytes`) and each block's backward
// (the saved bytes of blocks 0..j, plus block j's rebuilt activations if it is
// checkpointed, plus `working_bytes`).
double ActivationPeak(const std::vector<LayerCheckpointCost>& layers, const std::vector<bool>& checkpointed,
                      double head_bytes, double working_bytes);

// The blocks to checkpoint on top of `start`, in the order chosen: greedily
// the one that lowers ActivationPeak most per second of recompute (ties: the
// farthest from those chosen), until the peak is at most `budget_bytes`; if
// the budget cannot be met, every block that lowers the peak.
std::vector<int> CheckpointOrder(const std::vector<LayerCheckpointCost>& layers, double head_bytes,
                                 double working_bytes, double budget_bytes, std::vector<bool> start = {});
// `start` with CheckpointOrder's blocks added: one flag per block.
std::vector<bool> ChooseCheckpointLayers(const std::vector<LayerCheckpointCost>& layers, double head_bytes,
                                         double working_bytes, double budget_bytes, std::vector<bool> start = {});

}  // namespace llmplan
