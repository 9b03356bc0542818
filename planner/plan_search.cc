// SearchPlans (planner/plan_search.h): at each GPU count tried, every
// candidate plan (search_candidates.h) with its checkpointed blocks fitted by
// the evaluator (search_checkpoints.h), then the variants that could win
// (search_variants.h, pruned by search_bounds.h); the fastest plan that fits
// is the answer, the best of the other families its alternatives.
#include "planner/plan_search.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include "base/user_error.h"
#include "planner/nvme_offload.h"
#include "planner/search_bounds.h"
#include "planner/search_candidates.h"
#include "planner/search_checkpoints.h"
#include "planner/search_variants.h"

namespace llmplan {

int64_t SearchGradAccumLimit(const ModelSpec& model) {
  // 2^14 unit-passes: about 0.3 s and 120 MB to simulate one plan of an 8B
  // model, ~30 plans per micro-batch.
  const int64_t passes = (int64_t{1} << 14) / std::max<int64_t>(model.layers + 2, 1);
  return std::min(MaxGradAccum(model), std::max<int64_t>(passes, 1));
}

namespace {

// The plans evaluated at one GPU count: those that fit, fastest first (equal
// speed: less memory first), and those that do not, closest to fitting first.
struct PlansAtCount {
  std::vector<Estimate> feasible, infeasible;

  void Add(Estimate e) { (e.fits ? feasible : infeasible).push_back(std::move(e)); }
  void Merge(PlansAtCount&& more) {
    for (auto& e : more.feasible) feasible.push_back(std::move(e));
    for (auto& e : more.infeasible) infeasible.push_back(std::move(e));
  }
  void Sort() {
    std::stable_sort(feasible.begin(), feasible.end(), [](const Estimate& a, const Estimate& b) {
      if (a.tokens_per_second_per_gpu != b.tokens_per_second_per_gpu)
        return a.tokens_per_second_per_gpu > b.tokens_per_second_per_gpu;
      return a.memory.device_peak_bytes < b.memory.device_peak_bytes;
    });
    std::stable_sort(infeasible.begin(), infeasible.end(), [](const Estimate& a, const Estimate& b) {
      return a.memory.device_peak_bytes - a.memory.capacity_bytes < b.memory.device_peak_bytes - b.memory.capacity_bytes;
    });
  }
};

// The search at one GPU count.
class Searcher {
 public:
  Searcher(const SearchRequest& r, const HardwareProfile& p, const PlanEvaluator& e)
      : req_(r), profile_(p), fitter_(r, p, e) {}

  int evaluated() const { return fitter_.evaluated(); }
  // Some micro-batch was left out because it needs more than
  // SearchGradAccumLimit micro-batches per step.
  bool untried_micro_batches() const { return untried_micro_batches_; }

  // The plans at one GPU count, the best of them also tried with a longer
  // loss chunk.
  PlansAtCount SearchAt(int gpus) {
    PlansAtCount out = SearchOffloads(gpus);
    if (!req_.loss_chunk_tokens && !out.feasible.empty()) {
      std::optional<Estimate> longer = WithLongerLossChunk(out.feasible.front(), req_, fitter_);
      if (longer) {
        out.Add(std::move(*longer));
        out.Sort();
      }
    }
    // Only where the profile measured what a graph does to each kernel:
    // without it, all a graph could be credited with is the host's
    // launches, which the host issuing ahead mostly hides anyway.
    if (!req_.cuda_graph && !out.feasible.empty() && profile_.device_kind != "cpu" && profile_.graph_kernel_overhead_s > 0) {
      std::optional<Estimate> graphed = WithCudaGraph(out.feasible.front(), req_, fitter_);
      if (graphed) {
        out.Add(std::move(*graphed));
        out.Sort();
      }
    }
    return out;
  }

 private:
  std::vector<Choice> Choices(int gpus, const std::vector<Offload>& offloads) {
    return CandidateChoices(req_, profile_, gpus, offloads, untried_micro_batches_);
  }

  // Parameter offload (params, optimizer+params) only adds copies to a
  // plan's step; what it can buy is recompute: the memory it frees (the fp32
  // master, or the compute-dtype shard) lets fewer blocks be checkpointed.
  // So its variant of a plan is evaluated only where that could make it the
  // fastest: where the plan without it (none, optimizer) does not fit, or
  // where removing the recompute those freed bytes can pay for would make
  // that plan faster than the best found (ParamOffloadCouldBeat). That bound
  // keeps the search fast on a model whose blocks are large next to its
  // shards (a 70B block's activations are GiBs; its master shard on 64 GPUs
  // 4 GiB) and still finds the plans where offload pays.
  PlansAtCount SearchOffloads(int gpus) {
    if (req_.offload) return SearchChoices(Choices(gpus, {*req_.offload}));
    if (req_.offload_to == OffloadTier::kNvme)
      return SearchChoices(Choices(gpus, {Offload::kOptimizer, Offload::kOptimizerAndParams}));
    // A CPU device's memory is the host's: offloading would move state from
    // the host to the host, and only add copies.
    const bool cpu_device = profile_.device_kind == "cpu";
    PlansAtCount out = SearchChoices(
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
      if (it == without_it.end() ||
          ParamOffloadCouldBeat(*it->second, c.offload, best, req_.checkpoint_layers.has_value(), profile_))
        more.push_back(c);
    }
    out.Merge(SearchChoices(more));
    out.Sort();
    if (!req_.replicate_edges) {
      const std::vector<Choice> edges = ReplicatedEdgeChoices(out.feasible, profile_);
      if (!edges.empty()) {
        out.Merge(SearchChoices(edges));
        out.Sort();
      }
    }
    return out;
  }

  PlansAtCount SearchChoices(const std::vector<Choice>& choices) {
    PlansAtCount out;
    for (const Choice& c : choices) {
      if (c.gpus == 1 && c.strategy == ShardingStrategy::kHybridShard) continue;
      out.Add(FitChoice(c));
    }
    out.Sort();
    return out;
  }

  // The plan of choice `c`, its checkpointed blocks and staging fitted, and
  // the variants that change what fits: the cast at gather, the AdamW state
  // on NVMe.
  Estimate FitChoice(const Choice& c) {
    Plan plan = PlanOf(c);
    plan.Validate();
    Estimate e = fitter_.FitCheckpointsAndStaging(plan, c.min_checkpointed);
    const bool can_cast = plan.offload == Offload::kNone && c.strategy != ShardingStrategy::kNoShard && c.group > 1;
    if (can_cast && !req_.cast_at_gather) e = BetterWithCastAtGather(std::move(e), req_, fitter_);
    // NVMe only where the host is what does not fit: it takes the AdamW
    // state (half the offloaded bytes) off the host and adds disk time.
    if (!e.fits && !req_.offload_to && OffloadsOptimizer(plan.offload) && HasNvmeRates(profile_) &&
        e.memory.host_bytes > e.memory.host_capacity_bytes) {
      plan.offload_to = OffloadTier::kNvme;
      plan.delayed_update = false;  // not with NVMe (Plan::Validate)
      e = fitter_.FitCheckpointsAndStaging(plan);
    }
    return e;
  }

  Plan PlanOf(const Choice& c) const {
    Plan plan;
    plan.model = req_.model;
    plan.profile = req_.profile;
    plan.gpus = c.gpus;
    plan.gpus_per_node = req_.gpus_per_node > 0 ? req_.gpus_per_node : profile_.gpus_per_node;
    plan.host_memory_per_node_bytes = req_.host_memory_per_node_bytes;
    plan.seq_len = req_.seq_len;
    plan.optimizer = req_.optimizer;
    plan.prefetch_depth = req_.prefetch_depth;
    plan.fused_kernels = req_.fused_kernels;
    plan.attention = req_.attention;
    plan.document_attention_work = req_.document_attention_work;
    plan.trained_fraction = req_.trained_fraction;
    plan.loss_chunk_tokens = req_.loss_chunk_tokens.value_or(kDefaultLossChunkTokens);
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
    const bool can_cast = plan.offload == Offload::kNone && c.strategy != ShardingStrategy::kNoShard && c.group > 1;
    plan.cast_at_gather = can_cast && req_.cast_at_gather.value_or(false);
    plan.cuda_graph = req_.cuda_graph.value_or(false) && CanCaptureCudaGraph(plan);
    return plan;
  }

  const SearchRequest& req_;
  const HardwareProfile& profile_;
  CheckpointFitter fitter_;
  bool untried_micro_batches_ = false;
};

void CheckRequest(const SearchRequest& req) {
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
}

// --gpus auto: powers of two below a node, then whole nodes (every node up
// to 8, then in steps of an eighth), those that divide the global batch.
std::vector<int> GpuCountsToTry(const SearchRequest& req, const HardwareProfile& profile) {
  std::vector<int> counts;
  int gpn = req.gpus_per_node > 0 ? req.gpus_per_node : profile.gpus_per_node;
  for (int g = 1; g < gpn; g *= 2) counts.push_back(g);
  // int64 and capped at Plan's limit: --max-gpus near INT_MAX would make g overflow and loop forever.
  const int64_t max_gpus = std::min<int64_t>(req.max_gpus, int64_t{1} << 20);
  for (int64_t g = gpn; g <= max_gpus; g += (g < 8 * gpn ? gpn : g / 8 / gpn * gpn))
    counts.push_back(static_cast<int>(g));
  if (req.global_batch > 0)
    counts.erase(std::remove_if(counts.begin(), counts.end(), [&](int g) { return req.global_batch % g != 0; }),
                 counts.end());
  return counts;
}

double TrainSeconds(const Estimate& e, double train_tokens) {
  return train_tokens / (e.tokens_per_second_per_gpu * e.plan.gpus);
}

// Some plan fits, and trains in the target time if there is one.
bool MeetsTarget(const PlansAtCount& at, const SearchRequest& req, double train_tokens) {
  return !at.feasible.empty() &&
         (req.target_days <= 0 || TrainSeconds(at.feasible.front(), train_tokens) <= req.target_days * 86400);
}

// The fewest of `counts` that meets the target (the largest when none does).
// More GPUs never need more memory per GPU (smaller shards, fewer sequences
// each) and never train slower overall, so both questions are monotone in
// the count: binary search instead of a scan.
PlansAtCount SearchFewestGpus(Searcher& searcher, const std::vector<int>& counts, const SearchRequest& req,
                              double train_tokens) {
  if (counts.empty()) return {};
  std::map<size_t, PlansAtCount> searched;
  auto at_index = [&](size_t i) -> const PlansAtCount& {
    auto it = searched.find(i);
    if (it == searched.end()) it = searched.emplace(i, searcher.SearchAt(counts[i])).first;
    return it->second;
  };
  size_t lo = 0, hi = counts.size() - 1;
  if (MeetsTarget(at_index(hi), req, train_tokens)) {
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (MeetsTarget(at_index(mid), req, train_tokens)) hi = mid;
      else lo = mid + 1;
    }
  }
  return at_index(hi);
}

// Why nothing met the request, with the nearest plans as alternatives.
void ExplainNone(const PlansAtCount& at, const SearchRequest& req, bool untried_micro_batches, SearchResult& result) {
  result.found = false;
  if (!at.feasible.empty()) {
    result.best = at.feasible.front();
    result.why_none = "the fastest plan found (" + std::to_string(result.best.plan.gpus) + " GPUs, " +
                      PlanSummary(result.best.plan) + ") needs " +
                      FormatSeconds(TrainSeconds(result.best, result.train_tokens)) + " to train, over the target of " +
                      FormatSeconds(req.target_days * 86400) +
                      (req.global_batch > 0 ? " (the global batch of " + std::to_string(req.global_batch) +
                                                  " sequences caps the GPU count)"
                                            : "");
  } else if (!at.infeasible.empty()) {
    result.best = at.infeasible.front();
    result.why_none = "nothing fits: the closest plan (" + PlanSummary(result.best.plan) + "): " + result.best.why_not;
    if (untried_micro_batches)
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
}

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

// The best plan of each other (strategy, offload, edges) family, so the
// list shows real choices rather than near-copies, then the nearest misses.
std::vector<RankedAlternative> Alternatives(const PlansAtCount& at, const Estimate& best) {
  std::vector<RankedAlternative> alternatives;
  auto family = [](const Plan& p) {
    return StrategyName(p.strategy) + std::to_string(p.shard_group_size) + OffloadName(p.offload) +
           OffloadTierName(p.offload_to) + (p.replicate_edges ? "+edges" : "") + (p.delayed_update ? "+delayed" : "");
  };
  std::map<std::string, bool> seen;
  seen[family(best.plan)] = true;
  for (size_t i = 1; i < at.feasible.size() && alternatives.size() < 4; ++i) {
    const Plan& p = at.feasible[i].plan;
    const std::string key = family(p);
    if (seen[key]) continue;
    seen[key] = true;
    alternatives.push_back({at.feasible[i], SlowerReason(at.feasible[i], best)});
  }
  for (size_t i = 0; i < at.infeasible.size() && alternatives.size() < 6; ++i)
    alternatives.push_back({at.infeasible[i], at.infeasible[i].why_not});
  return alternatives;
}

}  // namespace

SearchResult SearchPlans(const SearchRequest& req, const HardwareProfile& profile, const PlanEvaluator& evaluate) {
  CheckRequest(req);
  Searcher searcher(req, profile, evaluate);
  SearchResult result;
  result.train_tokens = req.train_tokens > 0 ? req.train_tokens : 20.0 * static_cast<double>(req.model.TotalParams());

  const PlansAtCount at = req.gpus > 0 ? searcher.SearchAt(req.gpus)
                                       : SearchFewestGpus(searcher, GpuCountsToTry(req, profile), req, result.train_tokens);
  result.evaluated = searcher.evaluated();
  if (!MeetsTarget(at, req, result.train_tokens)) {
    ExplainNone(at, req, searcher.untried_micro_batches(), result);
    return result;
  }
  result.found = true;
  result.best = at.feasible.front();
  result.train_seconds = TrainSeconds(result.best, result.train_tokens);
  result.train_cost = result.train_seconds / 3600 * result.best.plan.gpus * profile.price_per_gpu_hour;
  result.alternatives = Alternatives(at, result.best);
  return result;
}

}  // namespace llmplan
