// Upper bounds that let the plan search skip a variant it cannot gain from:
// each says whether a variant of an evaluated plan could be faster than the
// best found, without evaluating it. Private to the search.
#pragma once

#include "planner/estimate.h"
#include "planner/hardware_profile.h"
#include "planner/plan.h"

namespace llmplan {

// Whether `fitted`'s plan with parameter offload `o` (params, or
// optimizer+params) could be faster than `best` tokens/s/GPU: an upper bound
// on its speed is its step less the recompute of the blocks the freed bytes
// could keep (each kept block costs its full activations less its
// checkpointed input), the offload's copies free. For a plan that did not
// fit even with its blocks checkpointed: whether the freed bytes cover what
// it lacked (the host only ever gets fuller). `checkpoints_pinned`: the
// request fixes the checkpointed blocks, so there is no recompute to buy back.
bool ParamOffloadCouldBeat(const Estimate& fitted, Offload o, double best, bool checkpoints_pinned,
                           const HardwareProfile& profile);

// Whether keeping the edges whole (Plan::replicate_edges) could make `e`
// faster than `best` tokens/s/GPU: the edges' part of its collectives and
// the compute those collectives slow down saved, as if the all-reduce that
// replaces them were free, less the recompute that buys back the memory
// their whole state takes.
bool EdgesCouldBeat(const Estimate& e, double best, const HardwareProfile& profile);

}  // namespace llmplan
