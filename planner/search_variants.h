// Variants the plan search tries on plans it has already evaluated, where
// they could win: the gather casting the fp32 master (Plan::cast_at_gather),
// a longer loss chunk (Plan::loss_chunk_tokens), the edges kept whole
// (Plan::replicate_edges) and the step's CUDA graph (Plan::cuda_graph).
// Private to the search.
#pragma once

#include <optional>
#include <vector>

#include "planner/estimate.h"
#include "planner/hardware_profile.h"
#include "planner/plan_search.h"
#include "planner/search_candidates.h"
#include "planner/search_checkpoints.h"

namespace llmplan {

// Plan::cast_at_gather trades 2 bytes a parameter of the shard for a cast on
// the gather's stream at every gather: worth a try only where `e` pays for
// memory with recompute or does not fit. Returns the faster of the two that
// fit (the one that fits, else the closer).
Estimate BetterWithCastAtGather(Estimate e, const SearchRequest& req, CheckpointFitter& fitter);

// The head's cross-entropy runs kDefaultLossChunkTokens tokens at a time so
// that its logits never exist whole; longer chunks make its three
// vocabulary-wide GEMMs larger and fewer (on one H200, Llama-3.2-1B at 16,384
// tokens per micro-batch: 4,096-token chunks +0.6%, 16,384 +0.75%, for 0.55
// and 3.5 GiB more allocated). `best` with the longer chunk, its checkpointed
// blocks fitted again (the head's larger logits may need more of them); none
// where its micro-batch is one chunk already.
std::optional<Estimate> WithLongerLossChunk(const Estimate& best, const SearchRequest& req, CheckpointFitter& fitter);

// Whether Plan::Validate lets `plan` take cuda_graph: one GPU, offload none,
// attention in the window, every target trained.
bool CanCaptureCudaGraph(const Plan& plan);

// Plan::cuda_graph removes the host's launches from the forward and
// backward (one graph launch instead) and keeps their tensors in a private
// pool: `best` with it, its checkpointed blocks fitted again (the pool may
// need more of them); none where `best` cannot take it. The search keeps
// it where it is predicted faster and fits, as any other plan.
std::optional<Estimate> WithCudaGraph(const Estimate& best, const SearchRequest& req, CheckpointFitter& fitter);

// Keeping the embedding and head whole trades memory (their whole fp32 state
// on every GPU) for communication (no gathers of the two largest units per
// micro-batch; one all-reduce per step instead of a reduce-scatter per
// micro-batch). It can only win where a plan is already fast and its gathers
// show, so it is tried on the best few of `feasible` (fastest first) that
// EdgesCouldBeat allows: a few more evaluations per GPU count.
std::vector<Choice> ReplicatedEdgeChoices(const std::vector<Estimate>& feasible, const HardwareProfile& profile);

}  // namespace llmplan
