// The plan search's candidates at one GPU count: every sharding strategy and
// shard group x micro-batch and gradient accumulation x offload the request
// leaves open (planner/plan_search.h). Private to the search.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/hardware_profile.h"
#include "planner/plan.h"
#include "planner/plan_search.h"

namespace llmplan {

// One candidate: the choices the search makes; the request fixes the rest.
struct Choice {
  int gpus;
  ShardingStrategy strategy;
  int group;
  int64_t micro_batch;
  int64_t grad_accum;
  Offload offload;
  bool replicate_edges = false;
  // A prefix of the checkpoint order shorter than this is known not to fit
  // (CheckpointFitter::FitCheckpoints' min_prefix).
  size_t min_checkpointed = 0;
};

// Plan::Validate's conditions for replicate_edges: sharded blocks, and no
// parameters streamed through gathers.
bool CanReplicateEdges(ShardingStrategy s, int group, Offload o);

// Every (strategy, group, micro-batch, grad-accum) the request allows on
// `gpus` GPUs, with each of `offloads`. Sets `untried_micro_batches` when a
// micro-batch is left out because it needs more than SearchGradAccumLimit
// micro-batches per step.
// Throws UserError for a global batch the GPUs cannot split as pinned.
std::vector<Choice> CandidateChoices(const SearchRequest& req, const HardwareProfile& profile, int gpus,
                                     const std::vector<Offload>& offloads, bool& untried_micro_batches);

}  // namespace llmplan
