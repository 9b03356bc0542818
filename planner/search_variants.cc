// Variants of evaluated plans for the plan search (see search_variants.h).
#include "planner/search_variants.h"

#include <utility>

#include "planner/search_bounds.h"

namespace llmplan {

namespace {

// The loss chunk tried beyond the default on each GPU count's best plan:
// 4,096 tokens take 80% of what 16,384 gain on one H200 (+0.6% of +0.75%)
// for a sixth of the memory.
constexpr int64_t kLongerLossChunkTokens = 4096;

// Edge-replicated variants tried per GPU count, from the best plans down.
constexpr int kEdgeVariants = 3;

}  // namespace

Estimate BetterWithCastAtGather(Estimate e, const SearchRequest& req, CheckpointFitter& fitter) {
  if (e.fits && (e.plan.checkpoint_layers.empty() || req.checkpoint_layers)) return e;
  Plan plan = e.plan;
  plan.cast_at_gather = true;
  if (!req.checkpoint_layers) plan.checkpoint_layers.clear();  // it may need fewer
  Estimate c = fitter.FitCheckpoints(plan);
  if (c.fits != e.fits) return c.fits ? c : e;
  if (c.fits) return c.tokens_per_second_per_gpu > e.tokens_per_second_per_gpu ? c : e;
  const auto over = [](const Estimate& x) { return x.memory.device_peak_bytes - x.memory.capacity_bytes; };
  return over(c) < over(e) ? c : e;
}

std::optional<Estimate> WithLongerLossChunk(const Estimate& best, const SearchRequest& req, CheckpointFitter& fitter) {
  Plan p = best.plan;
  if (p.loss_chunk_tokens >= p.micro_batch * p.seq_len) return std::nullopt;  // the micro-batch is one chunk already
  p.loss_chunk_tokens = kLongerLossChunkTokens;
  if (!req.checkpoint_layers) p.checkpoint_layers.clear();
  return fitter.FitCheckpoints(p);
}

bool CanCaptureCudaGraph(const Plan& plan) {
  return plan.gpus == 1 && plan.offload == Offload::kNone && plan.attention == AttentionSpan::kWindow &&
         plan.trained_fraction >= 1;
}

std::optional<Estimate> WithCudaGraph(const Estimate& best, const SearchRequest& req, CheckpointFitter& fitter) {
  Plan p = best.plan;
  if (p.cuda_graph || !CanCaptureCudaGraph(p)) return std::nullopt;
  p.cuda_graph = true;
  if (!req.checkpoint_layers) p.checkpoint_layers.clear();
  return fitter.FitCheckpoints(p);
}

std::vector<Choice> ReplicatedEdgeChoices(const std::vector<Estimate>& feasible, const HardwareProfile& profile) {
  std::vector<Choice> variants;
  for (const Estimate& e : feasible) {
    if (static_cast<int>(variants.size()) == kEdgeVariants) break;
    const Plan& p = e.plan;
    if (!CanReplicateEdges(p.strategy, p.shard_group_size, p.offload)) continue;
    if (!EdgesCouldBeat(e, feasible.front().tokens_per_second_per_gpu, profile)) continue;
    // Without optimizer offload, keeping the edges whole adds more device
    // memory at every moment than it saves (their whole fp32 master,
    // gradient and AdamW state, 18 bytes per parameter x (1 - 1/group),
    // against a gathered copy and a reduce-scatter's buffers, at most
    // 2 + 4 + 4/group): the variant needs at least as many checkpointed
    // blocks as the plan. With the optimizer offloaded it may need fewer.
    const size_t at_least = OffloadsOptimizer(p.offload) ? 0 : p.checkpoint_layers.size();
    variants.push_back({p.gpus, p.strategy, p.shard_group_size, p.micro_batch, p.grad_accum, p.offload, true, at_least});
  }
  return variants;
}

}  // namespace llmplan
