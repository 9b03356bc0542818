// The plan search's checkpointed blocks: the cheapest-recompute set that
// fits, for each candidate plan, judged by the evaluator (the simulator),
// which has the final word on memory. The analytic greedy order it searches
// (CheckpointOrder) is in planner/plan_search.h. Private to the search.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "planner/hardware_profile.h"
#include "planner/plan.h"
#include "planner/plan_search.h"
#include "planner/step_program.h"

namespace llmplan {

// Every evaluation of the search goes through here, counted.
class CheckpointFitter {
 public:
  // REQUIRES: all three outlive the fitter.
  CheckpointFitter(const SearchRequest& req, const HardwareProfile& profile, const PlanEvaluator& evaluate)
      : req_(req), profile_(profile), evaluate_(evaluate) {}

  int evaluated() const { return evaluated_; }

  // `plan` as it is, or with the fewest blocks of the greedy order that make
  // it fit (a binary search over the order's prefixes). `min_prefix`: a
  // prefix shorter than this is known not to fit (a variant that needs more
  // memory than a plan which needed min_prefix blocks), so the search starts
  // there. Pinned checkpoint layers are used as they are.
  Estimate FitCheckpoints(Plan plan, size_t min_prefix = 0);

  // FitCheckpoints with the offloaded optimizer's host staging chosen
  // (Plan::offload_staging): per unit where the host has room for it (its
  // gradient copies run under the backward, while the host is idle, so it
  // is never slower), else the slots. A delayed update keeps the slots; a
  // pinned form is used as it is.
  Estimate FitCheckpointsAndStaging(Plan plan, size_t min_prefix = 0);

 private:
  // The greedy checkpoint order of a plan's blocks and the block activation
  // sizes it was ranked by.
  struct Ranking {
    BlockActivationBytes act;
    std::vector<int> order;
  };
  // The same for every plan of one micro-batch and loss chunk (the head's
  // logits are part of the peak it ranks against): cached.
  const Ranking& RankingFor(const Plan& plan);
  Estimate Evaluate(const Plan& plan);

  const SearchRequest& req_;
  const HardwareProfile& profile_;
  const PlanEvaluator& evaluate_;
  int evaluated_ = 0;
  std::map<std::pair<int64_t, int64_t>, Ranking> ranking_cache_;  // per micro-batch and loss chunk
};

}  // namespace llmplan
