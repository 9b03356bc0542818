// Upper bounds for the plan search's variants (see search_bounds.h).
#include "planner/search_bounds.h"

#include <algorithm>
#include <cmath>

#include "planner/step_program.h"

namespace llmplan {

namespace {

// Edges under this share of the parameters are not worth keeping whole
// (EdgesCouldBeat).
constexpr double kEdgeMinShare = 0.05;

}  // namespace

bool ParamOffloadCouldBeat(const Estimate& fitted, Offload o, double best, bool checkpoints_pinned,
                           const HardwareProfile& profile) {
  const Plan& p = fitted.plan;
  const double shard_params = static_cast<double>(p.model.TotalParams()) / p.shard_group_size + (p.model.layers + 2);
  const double freed = (o == Offload::kParams ? 4.0 : DTypeBytes(p.param_dtype)) * shard_params;
  if (!fitted.fits) {
    const MemoryEstimate& m = fitted.memory;
    if (m.host_bytes > m.host_capacity_bytes) return false;
    return m.device_peak_bytes * (1 + m.margin_fraction) - m.capacity_bytes < freed;
  }
  if (p.checkpoint_layers.empty() || checkpoints_pinned) return false;  // nothing to buy back
  double recompute = 0;
  for (const auto& [name, seconds] : fitted.time.breakdown)
    if (name == "recompute") recompute = seconds;
  const BlockActivationBytes act = BlockActivations(p, profile);
  const double per_block = std::max(act.full - act.checkpointed, 1.0);
  const double checkpointed = static_cast<double>(p.checkpoint_layers.size());
  const double kept = std::min(checkpointed, std::floor(freed / per_block) + 1);
  const double step = fitted.time.step_seconds;
  const double bound_step = step - recompute * kept / checkpointed;
  if (!(bound_step > 0)) return true;
  return fitted.tokens_per_second_per_gpu * step / bound_step > best;
}

bool EdgesCouldBeat(const Estimate& e, double best, const HardwareProfile& profile) {
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
  const double saving = share * collectives * (1 + profile.compute_slowdown_during_collectives);
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
    const BlockActivationBytes act = BlockActivations(p, profile);
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

}  // namespace llmplan
