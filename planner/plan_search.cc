#include "planner/plan_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "planner/nvme_offload.h"
#include "planner/step_program.h"
#include "base/user_error.h"

namespace llmplan {

// ---------------------------------------------------------------------------
// Checkpointed-layer selection
// ---------------------------------------------------------------------------

double ActivationPeak(const std::vector<LayerCheckpointCost>& layers, const std::vector<bool>& ckpt,
                      double head_bytes, double working_bytes) {
  double saved = 0;
  for (size_t i = 0; i < layers.size(); ++i) saved += ckpt[i] ? layers[i].checkpointed_bytes : layers[i].full_bytes;
  double peak = saved + head_bytes;  // end of forward: everything saved, plus the loss
  // Backward runs from the last block down; block j's saved bytes are freed
  // after its backward, so before it blocks 0..j are all still held.
  double prefix = saved;
  for (size_t j = layers.size(); j-- > 0;) {
    double rebuilt = ckpt[j] ? layers[j].full_bytes - layers[j].checkpointed_bytes : 0;
    peak = std::max(peak, prefix + rebuilt + working_bytes);
    prefix -= ckpt[j] ? layers[j].checkpointed_bytes : layers[j].full_bytes;
  }
  return peak;
}

std::vector<int> CheckpointOrder(const std::vector<LayerCheckpointCost>& layers, double head_bytes,
                                 double working_bytes, double budget_bytes, std::vector<bool> ckpt) {
  const size_t n = layers.size();
  if (ckpt.size() != n) ckpt.assign(n, false);
  std::vector<int> order;
  double peak = ActivationPeak(layers, ckpt, head_bytes, working_bytes);
  // Per round, the peak with each candidate added comes from prefix/suffix
  // maxima in O(1) (below), so a round is O(n) and the order O(n^2): trying
  // every candidate with ActivationPeak made it O(n^3), minutes at 1,000+ layers.
  std::vector<double> back(n), upto(n), after(n + 1);
  std::vector<int> left(back.size()), right(back.size());
  while (peak > budget_bytes) {
    // Backward peaks B_j of the current set, their maxima over j <= i and j > i,
    // and the nearest chosen block on each side.
    double saved = 0;
    for (size_t i = 0; i < n; ++i) saved += ckpt[i] ? layers[i].checkpointed_bytes : layers[i].full_bytes;
    double prefix = saved;
    for (size_t j = n; j-- > 0;) {
      back[j] = prefix + (ckpt[j] ? layers[j].full_bytes - layers[j].checkpointed_bytes : 0) + working_bytes;
      prefix -= ckpt[j] ? layers[j].checkpointed_bytes : layers[j].full_bytes;
    }
    after[n] = -std::numeric_limits<double>::infinity();
    for (size_t j = n; j-- > 0;) after[j] = std::max(after[j + 1], back[j]);
    for (size_t j = 0; j < n; ++j) upto[j] = j > 0 ? std::max(upto[j - 1], back[j]) : back[j];
    for (size_t j = 0, last = n; j < n; ++j) {
      if (ckpt[j]) last = j;
      left[j] = last == n ? -1 : static_cast<int>(last);
    }
    for (size_t j = n, next = n; j-- > 0;) {
      if (ckpt[j]) next = j;
      right[j] = next == n ? -1 : static_cast<int>(next);
    }
    // Most peak reduction per second of recompute. Ties (identical blocks)
    // go to the block farthest from those already chosen, which spreads
    // recompute evenly ("every k-th block") instead of bunching it.
    int best = -1;
    double best_gain = 0;
    int best_distance = -1;
    for (size_t i = 0; i < n; ++i) {
      if (ckpt[i]) continue;
      // Checkpointing block i sheds d = full - input from the saved total and
      // from every backward peak above it; its own backward peak is unchanged
      // (it rebuilds exactly d), and those below it are untouched.
      const double d = layers[i].full_bytes - layers[i].checkpointed_bytes;
      const double p = std::max({saved - d + head_bytes, upto[i], after[i + 1] - d});
      if (peak - p <= peak * 1e-12) continue;  // lowers nothing (e.g. the last block)
      double gain = (peak - p) / std::max(layers[i].recompute_seconds, 1e-12);
      int distance = static_cast<int>(n);
      if (left[i] >= 0) distance = std::min(distance, static_cast<int>(i) - left[i]);
      if (right[i] >= 0) distance = std::min(distance, right[i] - static_cast<int>(i));
      bool better = best < 0 || gain > best_gain * (1 + 1e-9) ||
                    (gain >= best_gain * (1 - 1e-9) && distance > best_distance);
      if (better) {
        best = static_cast<int>(i);
        best_gain = gain;
        best_distance = distance;
      }
    }
    if (best < 0) break;  // nothing left that helps
    ckpt[best] = true;
    order.push_back(best);
    peak = ActivationPeak(layers, ckpt, head_bytes, working_bytes);
  }
  return order;
}

std::vector<bool> ChooseCheckpointLayers(const std::vector<LayerCheckpointCost>& layers, double head_bytes,
                                         double working_bytes, double budget_bytes, std::vector<bool> start) {
  if (start.size() != layers.size()) start.assign(layers.size(), false);
  for (int i : CheckpointOrder(layers, head_bytes, working_bytes, budget_bytes, start)) start[i] = true;
  return start;
}

// ---------------------------------------------------------------------------
// Search
// ---------------------------------------------------------------------------

int64_t SearchGradAccumLimit(const ModelSpec& model) {
  // 2^14 unit-passes: about 0.3 s and 120 MB to simulate one plan of an 8B
  // model, ~30 plans per micro-batch.
  const int64_t passes = (int64_t{1} << 14) / std::max<int64_t>(model.layers + 2, 1);
  return std::min(MaxGradAccum(model), std::max<int64_t>(passes, 1));
}

namespace {

struct Choice {
  int gpus;
  ShardingStrategy strategy;
  int group;
  int64_t micro_batch;
  int64_t grad_accum;
  Offload offload;
  bool replicate_edges = false;
  size_t min_checkpointed = 0;  // FitCheckpoints' min_prefix
};

// Plan::Validate's conditions for replicate_edges: sharded blocks, and no
// parameters streamed through gathers.
bool CanReplicateEdges(ShardingStrategy s, int group, Offload o) {
  return s != ShardingStrategy::kNoShard && group > 1 && o != Offload::kOptimizerAndParams;
}

// Edge-replicated variants tried per GPU count, from the best plans down,
// for models whose embedding and head hold at least this share of the
// parameters.
constexpr int kEdgeVariants = 3;
// The loss chunk the search tries beyond the default on each GPU count's
// best plan (Searcher::TryLongerLossChunk): 4,096 tokens took 80% of what
// 16,384 gained on one H200 (+0.6% of +0.75%) for a sixth of the memory.
constexpr int64_t kLongerLossChunkTokens = 4096;
constexpr double kEdgeMinShare = 0.05;

// The largest micro-batch the search tries when none is pinned.
constexpr int64_t kSearchMaxMicroBatch = 256;


class Searcher {
 public:
  Searcher(const SearchRequest& r, const HardwareProfile& p, const PlanEvaluator& e) : req_(r), profile_(p), eval_(e) {}

  int evaluated = 0;
  // Some micro-batch was left out because it needs more than
  // SearchGradAccumLimit micro-batches per step.
  mutable bool untried_micro_batches = false;

  Plan BasePlan(int gpus) const {
    Plan plan;
    plan.model = req_.model;
    plan.profile = req_.profile;
    plan.gpus = gpus;
    plan.gpus_per_node = req_.gpus_per_node > 0 ? req_.gpus_per_node : profile_.gpus_per_node;
    plan.host_memory_per_node_bytes = req_.host_memory_per_node_bytes;
    plan.seq_len = req_.seq_len;
    plan.optimizer = req_.optimizer;
    plan.prefetch_depth = req_.prefetch_depth;
    plan.fused_kernels = req_.fused_kernels;
    plan.loss_chunk_tokens = req_.loss_chunk_tokens.value_or(kDefaultLossChunkTokens);
    return plan;
  }

  // Every (strategy, group, micro-batch, grad-accum) with each of `offloads`.
  std::vector<Choice> Choices(int gpus, const std::vector<Offload>& offloads) const {
    std::vector<std::pair<ShardingStrategy, int>> strategies;
    auto add_strategy = [&](ShardingStrategy s) {
      if (s == ShardingStrategy::kHybridShard) {
        std::vector<int> groups;
        if (req_.shard_group_size) {
          groups.push_back(*req_.shard_group_size);
        } else {
          int gpn = req_.gpus_per_node > 0 ? req_.gpus_per_node : profile_.gpus_per_node;
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
    if (req_.strategy) {
      add_strategy(*req_.strategy);
    } else {
      add_strategy(ShardingStrategy::kFullShard);
      if (gpus > 1) {
        add_strategy(ShardingStrategy::kShardGradOp);
        add_strategy(ShardingStrategy::kHybridShard);
      }
      add_strategy(ShardingStrategy::kNoShard);
    }

    std::vector<std::pair<int64_t, int64_t>> batches;  // (micro_batch, grad_accum)
    if (req_.global_batch > 0) {
      if (req_.global_batch % gpus != 0)
        throw UserError("global batch " + std::to_string(req_.global_batch) + " is not a multiple of " +
                        std::to_string(gpus) + " GPUs; use a multiple such as " +
                        std::to_string(req_.global_batch / gpus * gpus +
                                       (req_.global_batch / gpus * gpus <= std::numeric_limits<int64_t>::max() - gpus ? gpus : 0)));
      const int64_t per_gpu = req_.global_batch / gpus;
      // A step of grad_accum micro-batches is simulated op by op, so its cost
      // grows with grad_accum: the search tries at most kSearchGradAccum of
      // them (about 0.3 s per plan for an 8B model), a pinned grad_accum up
      // to Plan's MaxGradAccum.
      const int64_t max_ga = req_.grad_accum ? MaxGradAccum(req_.model) : SearchGradAccumLimit(req_.model);
      const int64_t max_mb = req_.micro_batch ? *req_.micro_batch : kSearchMaxMicroBatch;
      if (per_gpu / max_mb > max_ga)  // also keeps the request's size out of every loop below
        throw UserError("global batch " + std::to_string(req_.global_batch) + " on " + std::to_string(gpus) +
                        (gpus == 1 ? " GPU is " : " GPUs is ") + std::to_string(per_gpu) + " sequences per GPU per step, over the " +
                        std::to_string(max_mb * max_ga) + " the search can try for " + req_.model.name +
                        " (micro-batch <= " + std::to_string(max_mb) + " x grad-accum <= " + std::to_string(max_ga) +
                        "); use a smaller global batch or more GPUs");
      for (int64_t mb = 1; mb <= max_mb; ++mb) {
        if (per_gpu % mb != 0) continue;
        if (per_gpu / mb > max_ga) {  // a larger micro-batch may do
          untried_micro_batches = true;
          continue;
        }
        if (req_.micro_batch && mb != *req_.micro_batch) continue;
        if (req_.grad_accum && per_gpu / mb != *req_.grad_accum) continue;
        batches.emplace_back(mb, per_gpu / mb);
      }
      if (batches.empty() && (req_.micro_batch || req_.grad_accum))
        throw UserError("no micro-batch x grad-accum gives " + std::to_string(per_gpu) +
                        " sequences per GPU with the pinned values; change the micro-batch, the gradient accumulation or the global batch");
      if (batches.empty())
        throw UserError("no micro-batch <= " + std::to_string(max_mb) + " splits the " + std::to_string(per_gpu) +
                        " sequences per GPU into at most " + std::to_string(max_ga) +
                        " micro-batches; use a global batch with small factors (a multiple of " +
                        std::to_string(gpus * 64) + "), or pin the micro-batch and the gradient accumulation");
    } else {
      int64_t ga = req_.grad_accum.value_or(1);
      if (req_.micro_batch) {
        batches.emplace_back(*req_.micro_batch, ga);
      } else {
        for (int64_t mb = 1; mb <= 64; mb *= 2) batches.emplace_back(mb, ga);
      }
    }
    std::vector<Choice> out;
    for (auto [s, g] : strategies)
      for (auto [mb, ga] : batches)
        for (Offload o : offloads) {
          // Streamed parameters need gathers to stream into (Plan::Validate).
          if (o == Offload::kOptimizerAndParams && s == ShardingStrategy::kNoShard) continue;
          const bool edges = req_.replicate_edges.value_or(false);
          if (edges && !CanReplicateEdges(s, g, o)) continue;
          out.push_back({gpus, s, g, mb, ga, o, edges});
        }
    return out;
  }

  Estimate Evaluate(const Plan& p) {
    ++evaluated;
    return eval_(p);
  }

  // The cheapest-recompute checkpoint set that fits, judged by the evaluator:
  // the greedy order ranks blocks once (analytic peak), then a binary search
  // over its prefixes asks the simulator, which has the final word on memory.
  // `min_prefix`: a prefix of the checkpoint order shorter than this is known
  // not to fit (a variant that needs more memory than a plan which needed
  // min_prefix blocks), so the search starts there instead of at none.
  Estimate FitCheckpoints(Plan plan, size_t min_prefix = 0) {
    const bool pinned = req_.checkpoint_layers.has_value();
    auto with_prefix = [&](size_t k) {
      const std::vector<int>& order = RankingFor(plan).order;
      Plan p = plan;
      p.checkpoint_layers.assign(order.begin(), order.begin() + static_cast<long>(k));
      std::sort(p.checkpoint_layers.begin(), p.checkpoint_layers.end());
      return p;
    };
    Estimate e = Evaluate(min_prefix > 0 && !pinned ? with_prefix(min_prefix) : plan);
    if (e.fits || pinned) return e;
    if (e.memory.host_bytes > e.memory.host_capacity_bytes) return e;  // recompute cannot help the host
    const Ranking& ranking = RankingFor(plan);
    const std::vector<int>& order = ranking.order;
    if (min_prefix >= order.size()) return e;
    // Each checkpointed block sheds (full - output) bytes: a first guess of
    // how many are needed, which the simulator and the allocator replay then
    // confirm or correct (usually two evaluations).
    double excess = e.memory.device_peak_bytes * (1 + e.memory.margin_fraction) - e.memory.capacity_bytes;
    double shed = ranking.act.full - ranking.act.checkpointed;
    size_t guess = std::min(order.size(), min_prefix + static_cast<size_t>(std::ceil(excess / std::max(shed, 1.0))));
    size_t lo = min_prefix, hi = order.size();  // prefix lo does not fit, prefix hi fits (once checked)
    Estimate best;
    bool have_best = false;
    auto probe = [&](size_t k) {
      Estimate m = Evaluate(with_prefix(k));
      if (m.fits) {
        hi = k;
        best = std::move(m);
        have_best = true;
        return true;
      }
      lo = std::max(lo, k);
      if (k == order.size()) best = std::move(m);
      return false;
    };
    if (guess > lo && probe(guess) && guess - 1 > lo) probe(guess - 1);
    // Even every useful block is not enough (already known when that was the guess).
    if (!have_best && (guess == order.size() || !probe(order.size()))) return best;
    while (hi - lo > 1) probe((lo + hi) / 2);
    return best;
  }

  // FitCheckpoints with the offloaded optimizer's host staging chosen
  // (Plan::offload_staging): per unit where the host has room for it (its
  // gradient copies run under the backward, while the host is idle, so it
  // is never slower), else the slots. The host's bytes do not depend on the
  // checkpointed blocks, so the first evaluation of a plan the host cannot
  // hold says so. A delayed update keeps the slots; a pinned form is used
  // as it is.
  Estimate FitCheckpointsAndStaging(Plan plan, size_t min_prefix = 0) {
    if (!OffloadsOptimizer(plan.offload) || plan.delayed_update) return FitCheckpoints(plan, min_prefix);
    plan.offload_staging = req_.offload_staging.value_or(OffloadStaging::kUnit);
    Estimate e = FitCheckpoints(plan, min_prefix);
    if (req_.offload_staging || e.fits || e.memory.host_bytes <= e.memory.host_capacity_bytes) return e;
    plan.offload_staging = OffloadStaging::kSlots;
    return FitCheckpoints(plan, min_prefix);
  }

  // Plan::cast_at_gather trades 2 bytes a parameter of the shard for a cast
  // on the gather's stream at every gather: worth a try only where `e` pays
  // for memory with recompute or does not fit. The faster of the two that
  // fit (the one that fits, else the closer).
  Estimate BetterWithCastAtGather(Estimate e) {
    if (e.fits && (e.plan.checkpoint_layers.empty() || req_.checkpoint_layers)) return e;
    Plan plan = e.plan;
    plan.cast_at_gather = true;
    if (!req_.checkpoint_layers) plan.checkpoint_layers.clear();  // it may need fewer
    Estimate c = FitCheckpoints(plan);
    if (c.fits != e.fits) return c.fits ? c : e;
    if (c.fits) return c.tokens_per_second_per_gpu > e.tokens_per_second_per_gpu ? c : e;
    const auto over = [](const Estimate& x) { return x.memory.device_peak_bytes - x.memory.capacity_bytes; };
    return over(c) < over(e) ? c : e;
  }

  // The greedy checkpoint order of a plan's blocks (the same for every plan
  // of one micro-batch and loss chunk: the head's logits are part of the
  // peak it ranks against) and the block activation sizes it was ranked by.
  struct Ranking {
    BlockActivationBytes act;
    std::vector<int> order;
  };
  const Ranking& RankingFor(const Plan& plan) {
    const std::pair<int64_t, int64_t> key(plan.micro_batch, plan.loss_chunk_tokens);
    auto cached = ranking_cache_.find(key);
    if (cached != ranking_cache_.end()) return cached->second;
    const BlockActivationBytes act = BlockActivations(plan, profile_);
    // Identical blocks cost the same to recompute; unit cost suffices to rank.
    std::vector<LayerCheckpointCost> layers(static_cast<size_t>(plan.model.layers), {act.full, act.checkpointed, 1.0});
    return ranking_cache_.emplace(key, Ranking{act, CheckpointOrder(layers, act.head, act.working, 0.0, {})})
        .first->second;
  }

  struct AtCount {
    std::vector<Estimate> feasible, infeasible;
  };

  // Parameter offload (params, optimizer+params) only adds copies to a
  // plan's step; what it can buy is recompute: the memory it frees (the fp32
  // master, or the compute-dtype shard) lets fewer blocks be checkpointed.
  // So its variant of a plan is evaluated only where that could make it the
  // fastest: where the plan without it (none, optimizer) does not fit, or
  // where removing the recompute those freed bytes can pay for would make
  // that plan faster than the best found. That bound keeps the search as fast
  // as before on a model whose blocks are large next to its shards (a 70B
  // block's activations are GiBs; its master shard on 64 GPUs 4 GiB) and
  // still finds the plans where offload pays.
  // The plans at one GPU count, the best of them also tried with a longer
  // loss chunk.
  AtCount SearchAt(int gpus) {
    AtCount out = SearchStrategies(gpus);
    if (!req_.loss_chunk_tokens) TryLongerLossChunk(out);
    return out;
  }

  // The head's cross-entropy runs kDefaultLossChunkTokens tokens at a time
  // so that its logits never exist whole; longer chunks make its three
  // vocabulary-wide GEMMs larger and fewer (measured 2026-12-02 on one H200,
  // Llama-3.2-1B at 16,384 tokens per micro-batch: 4,096-token chunks +0.6%,
  // 16,384 +0.75%, for 0.55 and 3.5 GiB more allocated). The best feasible
  // plan is tried with the longer chunk, its checkpointed blocks fitted
  // again (the head's larger logits may need more of them), and kept where
  // it fits and is faster.
  void TryLongerLossChunk(AtCount& out) {
    if (out.feasible.empty()) return;
    Plan p = out.feasible.front().plan;
    if (p.loss_chunk_tokens >= p.micro_batch * p.seq_len) return;  // the micro-batch is one chunk already
    p.loss_chunk_tokens = kLongerLossChunkTokens;
    if (!req_.checkpoint_layers) p.checkpoint_layers.clear();
    Estimate e = FitCheckpoints(p);
    (e.fits ? out.feasible : out.infeasible).push_back(std::move(e));
    SortFeasible(out);
    SortInfeasible(out);
  }

  AtCount SearchStrategies(int gpus) {
    if (req_.offload) return SearchChoices(Choices(gpus, {*req_.offload}));
    if (req_.offload_to == OffloadTier::kNvme)
      return SearchChoices(Choices(gpus, {Offload::kOptimizer, Offload::kOptimizerAndParams}));
    // A CPU device's memory is the host's: offloading would move state from
    // the host to the host, and only add copies.
    const bool cpu_device = profile_.device_kind == "cpu";
    AtCount out = SearchChoices(
        Choices(gpus, cpu_device ? std::vector<Offload>{Offload::kNone} : std::vector<Offload>{Offload::kNone, Offload::kOptimizer}));
    const double best = out.feasible.empty() ? 0 : out.feasible.front().tokens_per_second_per_gpu;
    auto key = [](ShardingStrategy s, int group, int64_t mb, int64_t ga, Offload o) {
      return std::make_tuple(static_cast<int>(s), group, mb, ga, static_cast<int>(o));
    };
    std::map<std::tuple<int, int, int64_t, int64_t, int>, const Estimate*> without_it;  // fitted or closest
    for (const auto* list : {&out.feasible, &out.infeasible}) {
      for (const Estimate& e : *list) {
        const Plan& p = e.plan;
        without_it[key(p.strategy, p.shard_group_size, p.micro_batch, p.grad_accum, p.offload)] = &e;
      }
    }
    std::vector<Choice> more;
    for (const Choice& c : cpu_device ? std::vector<Choice>{} : Choices(gpus, {Offload::kParams, Offload::kOptimizerAndParams})) {
      const Offload without = c.offload == Offload::kParams ? Offload::kNone : Offload::kOptimizer;
      auto it = without_it.find(key(c.strategy, c.group, c.micro_batch, c.grad_accum, without));
      if (it == without_it.end() || CouldBeat(*it->second, c.offload, best)) more.push_back(c);
    }
    AtCount extra = SearchChoices(more);
    for (auto& e : extra.feasible) out.feasible.push_back(std::move(e));
    for (auto& e : extra.infeasible) out.infeasible.push_back(std::move(e));
    SortFeasible(out);
    SortInfeasible(out);
    if (!req_.replicate_edges) TryReplicatedEdges(out);
    return out;
  }

  // Keeping the embedding and head whole (replicate_edges) trades memory
  // (their whole fp32 state on every GPU) for communication (no gathers of
  // the two largest units per micro-batch; one all-reduce per step instead
  // of a reduce-scatter per micro-batch). It can only win where a plan is
  // already fast and its gathers show, so it is tried on the best few
  // feasible plans only — a few more evaluations per GPU count.
  void TryReplicatedEdges(AtCount& out) {
    std::vector<Choice> variants;
    for (const Estimate& e : out.feasible) {
      if (static_cast<int>(variants.size()) == kEdgeVariants) break;
      const Plan& p = e.plan;
      if (!CanReplicateEdges(p.strategy, p.shard_group_size, p.offload)) continue;
      if (!EdgesCouldBeat(e, out.feasible.front().tokens_per_second_per_gpu)) continue;
      // Without optimizer offload, keeping the edges whole adds more device
      // memory at every moment than it saves (their whole fp32 master,
      // gradient and AdamW state, 18 bytes per parameter x (1 - 1/group),
      // against a gathered copy and a reduce-scatter's buffers, at most
      // 2 + 4 + 4/group): the variant needs at least as many checkpointed
      // blocks as the plan. With the optimizer offloaded it may need fewer.
      const size_t at_least = OffloadsOptimizer(p.offload) ? 0 : p.checkpoint_layers.size();
      variants.push_back({p.gpus, p.strategy, p.shard_group_size, p.micro_batch, p.grad_accum, p.offload, true, at_least});
    }
    if (variants.empty()) return;
    AtCount extra = SearchChoices(variants);
    for (auto& e : extra.feasible) out.feasible.push_back(std::move(e));
    for (auto& e : extra.infeasible) out.infeasible.push_back(std::move(e));
    SortFeasible(out);
    SortInfeasible(out);
  }

  // Whether `fitted`'s plan with parameter offload `o` could be faster than
  // `best`: an upper bound on its speed is its step less the recompute of the
  // blocks the freed bytes could keep (each kept block costs its full
  // activations less its checkpointed input), the offload's copies free.
  // For a plan that did not fit even with its blocks checkpointed: whether
  // the freed bytes cover what it lacked (the host only ever gets fuller).
  bool CouldBeat(const Estimate& fitted, Offload o, double best) const {
    const Plan& p = fitted.plan;
    const double shard_params = static_cast<double>(p.model.TotalParams()) / p.shard_group_size + (p.model.layers + 2);
    const double freed = (o == Offload::kParams ? 4.0 : DTypeBytes(p.param_dtype)) * shard_params;
    if (!fitted.fits) {
      const MemoryEstimate& m = fitted.memory;
      if (m.host_bytes > m.host_capacity_bytes) return false;
      return m.device_peak_bytes * (1 + m.margin_fraction) - m.capacity_bytes < freed;
    }
    if (p.checkpoint_layers.empty() || req_.checkpoint_layers) return false;  // nothing to buy back
    double recompute = 0;
    for (const auto& [name, seconds] : fitted.time.breakdown)
      if (name == "recompute") recompute = seconds;
    const BlockActivationBytes act = BlockActivations(p, profile_);
    const double per_block = std::max(act.full - act.checkpointed, 1.0);
    const double checkpointed = static_cast<double>(p.checkpoint_layers.size());
    const double kept = std::min(checkpointed, std::floor(freed / per_block) + 1);
    const double step = fitted.time.step_seconds;
    const double bound_step = step - recompute * kept / checkpointed;
    if (!(bound_step > 0)) return true;
    return fitted.tokens_per_second_per_gpu * step / bound_step > best;
  }

  // An upper bound on what keeping the edges whole can buy `e`: the edges'
  // part of its collectives (their share of the parameters bounds their share
  // of the gathered and reduced bytes) and the compute those collectives
  // slow down, as if the all-reduce that replaces them were free. Whether
  // that could make it faster than `best` tokens/s/GPU.
  bool EdgesCouldBeat(const Estimate& e, double best) const {
    const ModelSpec& m = e.plan.model;
    const double edges = static_cast<double>(m.EmbeddingParams() + m.HeadParams() + m.FinalNormParams());
    const double share = edges / static_cast<double>(m.TotalParams());
    // The guides' regime is a large vocabulary next to the blocks. Under 5%
    // of the parameters (Llama-3-70B: 3%, Llama-2-13B: 2.4%) the edges are
    // too small a part of the collectives to pay for their whole state on
    // every GPU, and the bounds below are too loose to say so: not tried.
    if (share < kEdgeMinShare) return false;
    double collectives = 0;
    for (const auto& [stream, seconds] : e.time.stream_busy)
      if (stream == StreamName(StreamKind::kGather) || stream == StreamName(StreamKind::kReduce)) collectives += seconds;
    const double saving = share * collectives * (1 + profile_.compute_slowdown_during_collectives);
    // And what it must pay, at least: the edges' whole state on every GPU,
    // less what their gathered copies (2 bytes per parameter) and one unit's
    // reduce-scatter buffers (4 + 4/G) held, beyond the plan's free memory
    // is bought back by recomputing more blocks, each at least its share of
    // the forward (its parameters' share of the GEMM FLOPs; attention only
    // adds to a block's part; 0.9 for the memory-bound ops' share).
    const Plan& p = e.plan;
    const double g = p.shard_group_size;
    const double state = OffloadsOptimizer(p.offload) ? 6 : OffloadsParams(p.offload) ? 14 : 18;
    const double embed = static_cast<double>(m.EmbeddingParams());
    const double head = edges - embed;
    const double freed = (6 + 4 / g) * std::max(embed, head) + 2 * std::min(embed, head);
    const double extra = std::max(0.0, state * (1 - 1 / g) * edges - freed);
    const MemoryEstimate& mem = e.memory;
    const double free = mem.capacity_bytes - mem.device_peak_bytes * (1 + mem.margin_fraction);
    double recompute = 0;
    if (extra > free) {
      const BlockActivationBytes act = BlockActivations(p, profile_);
      const double blocks = std::ceil((extra - free) / std::max(act.full - act.checkpointed, 1.0));
      if (blocks > static_cast<double>(p.model.layers) - static_cast<double>(p.checkpoint_layers.size()))
        return false;  // cannot fit even with every block checkpointed
      double forward = 0;
      for (const auto& [name, seconds] : e.time.breakdown)
        if (name == "forward") forward = seconds;
      const double block = static_cast<double>(m.ParamsPerBlock());
      recompute = blocks * 0.9 * forward * block /
                  (static_cast<double>(m.layers) * block + static_cast<double>(m.vocab * m.hidden));
    }
    const double step = e.time.step_seconds;
    const double bound = step - saving + recompute;
    if (!(bound > 0)) return true;
    return e.tokens_per_second_per_gpu * step / bound > best;
  }

  AtCount SearchChoices(const std::vector<Choice>& choices) {
    AtCount out;
    for (const Choice& c : choices) {
      const int gpus = c.gpus;
      Plan plan = BasePlan(gpus);
      plan.strategy = c.strategy;
      plan.shard_group_size = c.group;
      plan.micro_batch = c.micro_batch;
      plan.grad_accum = c.grad_accum;
      plan.offload = c.offload;
      plan.replicate_edges = c.replicate_edges;
      if (req_.offload_to == OffloadTier::kNvme && OffloadsOptimizer(c.offload)) plan.offload_to = OffloadTier::kNvme;
      if (req_.checkpoint_layers) plan.checkpoint_layers = *req_.checkpoint_layers;
      plan.delayed_update = req_.delayed_update && plan.offload == Offload::kOptimizer &&
                            plan.offload_to == OffloadTier::kHost && plan.grad_accum == 1;
      if (gpus == 1 && c.strategy == ShardingStrategy::kHybridShard) continue;
      const bool can_cast = plan.offload == Offload::kNone && c.strategy != ShardingStrategy::kNoShard && c.group > 1;
      plan.cast_at_gather = can_cast && req_.cast_at_gather.value_or(false);
      plan.Validate();
      Estimate e = FitCheckpointsAndStaging(plan, c.min_checkpointed);
      if (can_cast && !req_.cast_at_gather) e = BetterWithCastAtGather(std::move(e));
      // NVMe only where the host is what does not fit: it takes the AdamW
      // state (half the offloaded bytes) off the host and adds disk time.
      if (!e.fits && !req_.offload_to && OffloadsOptimizer(plan.offload) && HasNvmeRates(profile_) &&
          e.memory.host_bytes > e.memory.host_capacity_bytes) {
        plan.offload_to = OffloadTier::kNvme;
        plan.delayed_update = false;  // not with NVMe (Plan::Validate)
        e = FitCheckpointsAndStaging(plan);
      }
      (e.fits ? out.feasible : out.infeasible).push_back(std::move(e));
    }
    SortFeasible(out);
    SortInfeasible(out);
    return out;
  }

  // Fastest first; equal speed: less memory first.
  static void SortFeasible(AtCount& out) {
    std::stable_sort(out.feasible.begin(), out.feasible.end(), [](const Estimate& a, const Estimate& b) {
      if (a.tokens_per_second_per_gpu != b.tokens_per_second_per_gpu)
        return a.tokens_per_second_per_gpu > b.tokens_per_second_per_gpu;
      return a.memory.device_peak_bytes < b.memory.device_peak_bytes;
    });
  }

  static void SortInfeasible(AtCount& out) {
    std::stable_sort(out.infeasible.begin(), out.infeasible.end(), [](const Estimate& a, const Estimate& b) {
      return a.memory.device_peak_bytes - a.memory.capacity_bytes < b.memory.device_peak_bytes - b.memory.capacity_bytes;
    });
  }

 private:
  const SearchRequest& req_;
  const HardwareProfile& profile_;
  const PlanEvaluator& eval_;
  std::map<std::pair<int64_t, int64_t>, Ranking> ranking_cache_;  // per micro-batch and loss chunk
};


std::string SlowerReason(const Estimate& alt, const Estimate& best) {
  char buf[256];
  double slower = 1 - alt.tokens_per_second_per_gpu / best.tokens_per_second_per_gpu;
  // Name the time term that grew most against the best plan.
  std::string term;
  double grew = 0;
  for (const auto& [name, seconds] : alt.time.breakdown) {
    double base = 0;
    for (const auto& [n2, s2] : best.time.breakdown)
      if (n2 == name) base = s2;
    double per_token_alt = seconds / (alt.plan.micro_batch * alt.plan.grad_accum);
    double per_token_best = base / (best.plan.micro_batch * best.plan.grad_accum);
    if (per_token_alt - per_token_best > grew) {
      grew = per_token_alt - per_token_best;
      term = name;
    }
  }
  std::snprintf(buf, sizeof buf, "%.1f%% slower", 100 * slower);
  std::string r = buf;
  if (!term.empty()) r += " (more " + term + " per sequence)";
  return r;
}

}  // namespace

SearchResult SearchPlans(const SearchRequest& req, const HardwareProfile& profile, const PlanEvaluator& evaluate) {
  req.model.Validate();
  if (req.seq_len < 1 || req.seq_len > (int64_t{1} << 22)) throw UserError("sequence length must be between 1 and 4194304");
  if (req.seq_len > req.model.max_seq)
    throw UserError("sequence length " + std::to_string(req.seq_len) + " is above " + req.model.name +
                    "'s max_position_embeddings (" + std::to_string(req.model.max_seq) + "): use " +
                    std::to_string(req.model.max_seq) + " tokens or less, or a config.json with a larger "
                    "max_position_embeddings");
  if (req.global_batch < 0) throw UserError("global batch must be positive");
  if (req.micro_batch && (*req.micro_batch < 1 || *req.micro_batch > 65536))
    throw UserError("micro-batch must be between 1 and 65536");
  if (req.grad_accum && (*req.grad_accum < 1 || *req.grad_accum > 65536))
    throw UserError("gradient accumulation must be between 1 and 65536");
  if (req.gpus < 0 || req.gpus > (1 << 20)) throw UserError("GPU count must be between 1 and 1048576, or 0 (search)");
  if (req.delayed_update && req.offload_staging == OffloadStaging::kUnit)
    throw UserError("the delayed update moves gradients and parameters through the staging slots: pin the offload "
                    "staging to slots, or leave the update undelayed");

  Searcher searcher(req, profile, evaluate);
  SearchResult result;
  result.train_tokens = req.train_tokens > 0 ? req.train_tokens : 20.0 * static_cast<double>(req.model.TotalParams());

  auto train_seconds = [&](const Estimate& e) {
    return result.train_tokens / (e.tokens_per_second_per_gpu * e.plan.gpus);
  };

  std::vector<int> counts;
  if (req.gpus > 0) {
    counts = {req.gpus};
  } else {
    int gpn = req.gpus_per_node > 0 ? req.gpus_per_node : profile.gpus_per_node;
    for (int g = 1; g < gpn; g *= 2) counts.push_back(g);
    // int64 and capped at Plan's limit: --max-gpus near INT_MAX made g overflow and loop forever.
    const int64_t max_gpus = std::min<int64_t>(req.max_gpus, int64_t{1} << 20);
    for (int64_t g = gpn; g <= max_gpus; g += (g < 8 * gpn ? gpn : g / 8 / gpn * gpn))
      counts.push_back(static_cast<int>(g));
    if (req.global_batch > 0)
      counts.erase(std::remove_if(counts.begin(), counts.end(), [&](int g) { return req.global_batch % g != 0; }),
                   counts.end());
  }

  auto meets_target = [&](const Searcher::AtCount& c) {
    return !c.feasible.empty() && (req.target_days <= 0 || train_seconds(c.feasible.front()) <= req.target_days * 86400);
  };
  Searcher::AtCount at;
  if (req.gpus > 0) {
    at = searcher.SearchAt(req.gpus);
  } else if (!counts.empty()) {
    // More GPUs never need more memory per GPU (smaller shards, fewer sequences
    // each) and never train slower overall, so both questions are monotone in
    // the count: binary search instead of a scan.
    std::map<size_t, Searcher::AtCount> searched;
    auto at_index = [&](size_t i) -> const Searcher::AtCount& {
      auto it = searched.find(i);
      if (it == searched.end()) it = searched.emplace(i, searcher.SearchAt(counts[i])).first;
      return it->second;
    };
    size_t lo = 0, hi = counts.size() - 1;
    if (meets_target(at_index(hi))) {
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (meets_target(at_index(mid))) hi = mid;
        else lo = mid + 1;
      }
    }
    at = at_index(hi);
  }
  result.evaluated = searcher.evaluated;
  if (!meets_target(at)) {
    result.found = false;
    if (!at.feasible.empty()) {
      result.best = at.feasible.front();
      result.why_none = "the fastest plan found (" + std::to_string(result.best.plan.gpus) + " GPUs, " +
                        PlanSummary(result.best.plan) + ") needs " + FormatSeconds(train_seconds(result.best)) +
                        " to train, over the target of " + FormatSeconds(req.target_days * 86400) +
                        (req.global_batch > 0 ? " (the global batch of " + std::to_string(req.global_batch) +
                                                    " sequences caps the GPU count)"
                                              : "");
    } else if (!at.infeasible.empty()) {
      result.best = at.infeasible.front();
      result.why_none = "nothing fits: the closest plan (" + PlanSummary(result.best.plan) + "): " + result.best.why_not;
      if (searcher.untried_micro_batches)
        result.why_none += " (smaller micro-batches need over " + std::to_string(SearchGradAccumLimit(req.model)) +
                           " micro-batches per step and were not tried: pin the micro-batch and the gradient "
                           "accumulation to plan one)";
    } else if (req.gpus > 0) {  // no candidate at all: the pins exclude every plan
      result.why_none = "no plan on " + std::to_string(req.gpus) +
                        " GPUs matches the pinned choices (hybrid_shard needs a shard group strictly between 1 and "
                        "the GPU count that divides it)";
    } else {
      result.why_none = "no GPU count up to " + std::to_string(req.max_gpus) + " divides the global batch";
    }
    for (size_t i = 0; i < at.infeasible.size() && result.alternatives.size() < 5; ++i)
      if (&at.infeasible[i] != &at.infeasible.front() || at.feasible.size() > 0)
        result.alternatives.push_back({at.infeasible[i], at.infeasible[i].why_not});
    return result;
  }
  result.found = true;
  result.best = at.feasible.front();
  result.train_seconds = train_seconds(result.best);
  result.train_cost = result.train_seconds / 3600 * result.best.plan.gpus * profile.price_per_gpu_hour;

  // Alternatives: the best plan of each other (strategy, offload, edges)
  // family, so the list shows real choices rather than near-copies, then the
  // nearest misses.
  auto family = [](const Plan& p) {
    return StrategyName(p.strategy) + std::to_string(p.shard_group_size) + OffloadName(p.offload) +
           OffloadTierName(p.offload_to) + (p.replicate_edges ? "+edges" : "") + (p.delayed_update ? "+delayed" : "");
  };
  std::map<std::string, bool> seen;
  seen[family(result.best.plan)] = true;
  for (size_t i = 1; i < at.feasible.size() && result.alternatives.size() < 4; ++i) {
    const Plan& p = at.feasible[i].plan;
    const std::string key = family(p);
    if (seen[key]) continue;
    seen[key] = true;
    result.alternatives.push_back({at.feasible[i], SlowerReason(at.feasible[i], result.best)});
  }
  for (size_t i = 0; i < at.infeasible.size() && result.alternatives.size() < 6; ++i)
    result.alternatives.push_back({at.infeasible[i], at.infeasible[i].why_not});
  return result;
}

}  // namespace llmplan
