// Checkpointed blocks for the plan search: the analytic greedy order
// (ActivationPeak, CheckpointOrder, ChooseCheckpointLayers of plan_search.h)
// and the fitting of each candidate against the evaluator
// (CheckpointFitter, search_checkpoints.h).
#include "planner/search_checkpoints.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace llmplan {

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
  // every candidate with ActivationPeak would make it O(n^3), minutes at 1,000+ layers.
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

Estimate CheckpointFitter::Evaluate(const Plan& p) {
  ++evaluated_;
  return evaluate_(p);
}

const CheckpointFitter::Ranking& CheckpointFitter::RankingFor(const Plan& plan) {
  const std::pair<int64_t, int64_t> key(plan.micro_batch, plan.loss_chunk_tokens);
  auto cached = ranking_cache_.find(key);
  if (cached != ranking_cache_.end()) return cached->second;
  const BlockActivationBytes act = BlockActivations(plan, profile_);
  // Identical blocks cost the same to recompute; unit cost suffices to rank.
  std::vector<LayerCheckpointCost> layers(static_cast<size_t>(plan.model.layers), {act.full, act.checkpointed, 1.0});
  return ranking_cache_.emplace(key, Ranking{act, CheckpointOrder(layers, act.head, act.working, 0.0, {})})
      .first->second;
}

Estimate CheckpointFitter::FitCheckpoints(Plan plan, size_t min_prefix) {
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

Estimate CheckpointFitter::FitCheckpointsAndStaging(Plan plan, size_t min_prefix) {
  if (!OffloadsOptimizer(plan.offload) || plan.delayed_update) return FitCheckpoints(plan, min_prefix);
  plan.offload_staging = req_.offload_staging.value_or(OffloadStaging::kUnit);
  Estimate e = FitCheckpoints(plan, min_prefix);
  // The host's bytes do not depend on the checkpointed blocks, so the first
  // evaluation of a plan the host cannot hold says so.
  if (req_.offload_staging || e.fits || e.memory.host_bytes <= e.memory.host_capacity_bytes) return e;
  plan.offload_staging = OffloadStaging::kSlots;
  return FitCheckpoints(plan, min_prefix);
}

}  // namespace llmplan
