// The plan search's candidates at one GPU count (see search_candidates.h).
#include "planner/search_candidates.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "base/user_error.h"

namespace llmplan {

namespace {

// The largest micro-batch the search tries when none is pinned.
constexpr int64_t kSearchMaxMicroBatch = 256;

// (strategy, shard group) pairs: hybrid_shard with every group that divides
// the GPUs and fits the nodes (or the pinned one), the others with theirs.
std::vector<std::pair<ShardingStrategy, int>> StrategiesAndGroups(const SearchRequest& req,
                                                                  const HardwareProfile& profile, int gpus) {
  std::vector<std::pair<ShardingStrategy, int>> strategies;
  auto add_strategy = [&](ShardingStrategy s) {
    if (s == ShardingStrategy::kHybridShard) {
      std::vector<int> groups;
      if (req.shard_group_size) {
        groups.push_back(*req.shard_group_size);
      } else {
        int gpn = req.gpus_per_node > 0 ? req.gpus_per_node : profile.gpus_per_node;
        for (int g = 2; g < gpus; g *= 2)
          if (gpus % g == 0 && (g <= gpn || g % gpn == 0)) groups.push_back(g);
        if (gpus % gpn == 0 && gpn < gpus && std::find(groups.begin(), groups.end(), gpn) == groups.end())
          groups.push_back(gpn);
      }
      for (int g : groups) strategies.emplace_back(s, g);
    } else {
      int g = s == ShardingStrategy::kNoShard ? 1 : gpus;
      strategies.emplace_back(s, g);
    }
  };
  if (req.strategy) {
    add_strategy(*req.strategy);
  } else {
    add_strategy(ShardingStrategy::kFullShard);
    if (gpus > 1) {
      add_strategy(ShardingStrategy::kShardGradOp);
      add_strategy(ShardingStrategy::kHybridShard);
    }
    add_strategy(ShardingStrategy::kNoShard);
  }
  return strategies;
}

// (micro_batch, grad_accum) pairs: with a global batch, every split of each
// GPU's sequences the limits allow; without one, powers of two up to 64.
std::vector<std::pair<int64_t, int64_t>> Batches(const SearchRequest& req, int gpus, bool& untried_micro_batches) {
  std::vector<std::pair<int64_t, int64_t>> batches;
  if (req.global_batch <= 0) {
    int64_t ga = req.grad_accum.value_or(1);
    if (req.micro_batch) {
      batches.emplace_back(*req.micro_batch, ga);
    } else {
      for (int64_t mb = 1; mb <= 64; mb *= 2) batches.emplace_back(mb, ga);
    }
    return batches;
  }
  if (req.global_batch % gpus != 0)
    throw UserError("global batch " + std::to_string(req.global_batch) + " is not a multiple of " +
                    std::to_string(gpus) + " GPUs; use a multiple such as " +
                    std::to_string(req.global_batch / gpus * gpus +
                                   (req.global_batch / gpus * gpus <= std::numeric_limits<int64_t>::max() - gpus ? gpus : 0)));
  const int64_t per_gpu = req.global_batch / gpus;
  // A step of grad_accum micro-batches is simulated op by op, so its cost
  // grows with grad_accum: the search tries at most SearchGradAccumLimit of
  // them (about 0.3 s per plan for an 8B model), a pinned grad_accum up to
  // Plan's MaxGradAccum.
  const int64_t max_ga = req.grad_accum ? MaxGradAccum(req.model) : SearchGradAccumLimit(req.model);
  const int64_t max_mb = req.micro_batch ? *req.micro_batch : kSearchMaxMicroBatch;
  if (per_gpu / max_mb > max_ga)  // also keeps the request's size out of every loop below
    throw UserError("global batch " + std::to_string(req.global_batch) + " on " + std::to_string(gpus) +
                    (gpus == 1 ? " GPU is " : " GPUs is ") + std::to_string(per_gpu) + " sequences per GPU per step, over the " +
                    std::to_string(max_mb * max_ga) + " the search can try for " + req.model.name +
                    " (micro-batch <= " + std::to_string(max_mb) + " x grad-accum <= " + std::to_string(max_ga) +
                    "); use a smaller global batch or more GPUs");
  for (int64_t mb = 1; mb <= max_mb; ++mb) {
    if (per_gpu % mb != 0) continue;
    if (per_gpu / mb > max_ga) {  // a larger micro-batch may do
      untried_micro_batches = true;
      continue;
    }
    if (req.micro_batch && mb != *req.micro_batch) continue;
    if (req.grad_accum && per_gpu / mb != *req.grad_accum) continue;
    batches.emplace_back(mb, per_gpu / mb);
  }
  if (batches.empty() && (req.micro_batch || req.grad_accum))
    throw UserError("no micro-batch x grad-accum gives " + std::to_string(per_gpu) +
                    " sequences per GPU with the pinned values; change the micro-batch, the gradient accumulation or the global batch");
  if (batches.empty())
    throw UserError("no micro-batch <= " + std::to_string(max_mb) + " splits the " + std::to_string(per_gpu) +
                    " sequences per GPU into at most " + std::to_string(max_ga) +
                    " micro-batches; use a global batch with small factors (a multiple of " +
                    std::to_string(gpus * 64) + "), or pin the micro-batch and the gradient accumulation");
  return batches;
}

}  // namespace

bool CanReplicateEdges(ShardingStrategy s, int group, Offload o) {
  return s != ShardingStrategy::kNoShard && group > 1 && o != Offload::kOptimizerAndParams;
}

std::vector<Choice> CandidateChoices(const SearchRequest& req, const HardwareProfile& profile, int gpus,
                                     const std::vector<Offload>& offloads, bool& untried_micro_batches) {
  const std::vector<std::pair<ShardingStrategy, int>> strategies = StrategiesAndGroups(req, profile, gpus);
  const std::vector<std::pair<int64_t, int64_t>> batches = Batches(req, gpus, untried_micro_batches);
  std::vector<Choice> out;
  for (auto [s, g] : strategies)
    for (auto [mb, ga] : batches)
      for (Offload o : offloads) {
        // Streamed parameters need gathers to stream into (Plan::Validate).
        if (o == Offload::kOptimizerAndParams && s == ShardingStrategy::kNoShard) continue;
        const bool edges = req.replicate_edges.value_or(false);
        if (edges && !CanReplicateEdges(s, g, o)) continue;
        out.push_back({gpus, s, g, mb, ga, o, edges});
      }
  return out;
}

}  // namespace llmplan
