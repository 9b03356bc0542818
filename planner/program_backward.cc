// ProgramBuilder, backward phase: recompute checkpointed blocks, run each
// unit's backward from the head down, reduce its gradient (see
// program_builder.h).
#include "planner/program_builder.h"

namespace llmplan {

void ProgramBuilder::Backward(int mb) {
  const int n = NumUnits();
  const bool last_mb = mb == plan_.grad_accum - 1;
  int previous = last_forward_[n - 1];
  for (int u = n - 1; u >= 0; --u) {
    // The embedding's backward is a scatter-add of output gradients: it
    // needs no weights, so it is never re-gathered.
    int gathered = -1;
    if (GathersParams(u)) {
      if (KeepsParamsThroughBackward(u)) gathered = gather_fwd_[u];
      else if (U(u).kind != UnitKind::kEmbedding) gathered = Gather(u, mb, true);
    }
    std::vector<int>& saved = saved_[u];  // this micro-batch's forward's (or recompute's) tensors
    int recompute = -1;
    if (Recomputed(u)) {
      StepOp op;
      op.kind = OpKind::kRecompute;
      op.stream = StreamKind::kCompute;
      op.unit = u;
      op.micro_batch = mb;
      op.name = OpName("recompute", u, mb);
      FillForwardWork(u, op.work);
      op.deps = {gathered, previous};
      CallMemoryModel(MemoryCall::kBlockRecompute, saved, op.alloc_at_start, call_result_);
      saved.swap(call_result_);
      recompute = Add(std::move(op));
    }
    // The backward waits for the reduce-scatter two before it, whose shard
    // is accumulated just before (the executor waits on it there).
    int throttle = -1;
    if (reduce_scatters_.size() >= 2) {
      throttle = reduce_scatters_[reduce_scatters_.size() - 2];
      AccumulateThrough(throttle);
    }
    StepOp op;
    op.kind = OpKind::kBackward;
    op.stream = StreamKind::kCompute;
    op.unit = u;
    op.micro_batch = mb;
    op.name = OpName("backward", u, mb);
    FillBackwardWork(u, op.work);
    op.deps = {gathered, recompute, previous, throttle};
    // The backward's memory model call: on the forward's tensors and the
    // gradient flowing in from the unit above (the head's backward starts it).
    call_inputs_.assign(saved.begin(), saved.end());
    if (U(u).kind != UnitKind::kHead) call_inputs_.push_back(flowing_);
    const MemoryCall call = U(u).kind == UnitKind::kHead    ? MemoryCall::kHeadBackward
                            : U(u).kind == UnitKind::kBlock ? MemoryCall::kBlockBackward
                                                            : MemoryCall::kEmbeddingBackward;
    const MemoryTemplate& recorded = Recorded(call, call_inputs_);
    std::vector<MemoryDelta>& events = op.alloc_at_start;
    events.reserve(recorded.events.size() + 4);  // and the gradient buffers' events around it
    // The unsharded gradient in the compute dtype exists from the backward
    // that first writes it (a tied embedding's from the head's; the fused
    // loss's holder from the head's forward) to its reduction.
    MakeComputeGrad(u, op);
    if (U(u).kind == UnitKind::kHead && plan_.model.tied_embeddings) MakeComputeGrad(0, op);
    tensors_.Stamp(recorded, call_inputs_, events, call_result_);
    flowing_ = call_result_.empty() ? -1 : call_result_[0];  // the embedding's sends none
    saved.clear();
    if (G(u) > 1) {
      // Cast for the reduce-scatter (its private input), then the
      // compute-dtype buffer goes back to the allocator.
      reduce_input_[u] = tensors_.Alloc(MemoryCategory::kGradBuffers, ReduceBytes() * Padded(u), events);
      tensors_.Free(compute_grad_[u], events);
      compute_grad_[u] = -1;
    }
    const int bwd = Add(std::move(op));
    previous = bwd;
    if (gathered >= 0) Release(u, mb, bwd, true);
    ReduceGradients(u, mb, bwd, last_mb);
    if (plan_.delayed_update) DelayedUpdateOnHost(u, bwd);
  }
}

void ProgramBuilder::ReduceGradients(int u, int mb, int bwd, bool last_mb) {
  if (G(u) == 1) {
    // One copy of the state per rank: the compute-dtype gradient is added
    // into the fp32 one right away and its buffer released.
    StepOp op;
    op.kind = OpKind::kLocalReduce;
    op.stream = StreamKind::kCompute;
    op.unit = u;
    op.micro_batch = mb;
    op.name = OpName("reduce-local", u, mb);
    // Delayed update: the first write of the fp32 gradient waits for the
    // previous step's to be down (it is read by this step's host update).
    op.deps = {bwd, plan_.delayed_update && mb == 0 ? grad_down_[u] : -1};
    // Read the compute-dtype gradient, read and write the fp32 one — except
    // the step's first contribution, which only writes it
    // (FlatUnit::AccumulateIntoGrad).
    op.work.elementwise_bytes = Padded(u) * (ParamBytes() + (mb == 0 ? 4 : 8));
    op.work.launches = 2;
    if (last_mb && R(u) > 1) op.gradient_scale = 1.0 / R(u);
    // On a GPU the bf16 gradient is widened by llmplan's kernel, whose last
    // pass of the step also sums the squares for the grad norm (one more
    // launch: the blocks' partial sums).
    if (last_mb && op.gradient_scale == 1.0 && profile_.device_kind != "cpu" && ParamBytes() == 2) {
      squares_in_reduction_[u] = true;
      op.work.launches += 1;
    }
    if (AdamWReadsComputeGrad()) {
      // Nothing to widen: the pass only reads the gradient for its squares,
      // and the gradient stays for AdamW, which frees it (OptimizerStep).
      op.work.elementwise_bytes = Padded(u) * ParamBytes();
      AfterReduction(u, Add(std::move(op)), last_mb);
      return;
    }
    tensors_.Free(compute_grad_[u], op.alloc_at_start);
    compute_grad_[u] = -1;
    AfterReduction(u, Add(std::move(op)), last_mb);
    return;
  }
  // The reduce-dtype copy made at the end of the backward is scattered into a
  // temporary shard; both live until the shard is accumulated.
  StepOp rs;
  rs.kind = OpKind::kReduceScatter;
  rs.stream = StreamKind::kReduce;
  rs.group = CommGroup::kShard;
  rs.unit = u;
  rs.micro_batch = mb;
  rs.name = OpName("reduce-scatter", u, mb);
  rs.deps.reserve(2);  // and the compute op ToIssueOrder may add
  rs.deps.push_back(bwd);
  rs.work.collective = CollectiveOp::kReduceScatter;
  rs.work.collective_bytes = ReduceBytes() * Padded(u);
  rs.work.group_size = G(u);
  rs.work.spans_nodes = GroupSpansNodes(G(u));
  const int shard = tensors_.Alloc(MemoryCategory::kGradBuffers, ReduceBytes() * Padded(u) / G(u), rs.alloc_at_start);
  const int id = Add(std::move(rs));
  reduce_scatters_.push_back(id);
  pending_shards_.push_back({id, u, mb, {reduce_input_[u], shard}, last_mb});
  reduce_input_[u] = -1;
}

void ProgramBuilder::AccumulateThrough(int rs_id) {
  while (pending_head_ < pending_shards_.size() && pending_shards_[pending_head_].rs <= rs_id) {
    const PendingShard s = pending_shards_[pending_head_++];
    StepOp op;
    op.kind = OpKind::kAccumulateShard;
    op.stream = StreamKind::kCompute;
    op.unit = s.unit;
    op.micro_batch = s.mb;
    op.name = OpName("accumulate", s.unit, s.mb);
    op.deps = {s.rs, plan_.delayed_update && s.mb == 0 ? grad_down_[s.unit] : -1};  // as in ReduceGradients
    // Read the reduced shard, read and write the fp32 gradient shard (only
    // write it for the step's first micro-batch).
    op.work.elementwise_bytes = Padded(s.unit) / G(s.unit) * (ReduceBytes() + (s.mb == 0 ? 4 : 8));
    op.work.launches = 1;
    if (s.last_mb && R(s.unit) > 1) op.gradient_scale = 1.0 / R(s.unit);
    for (int t : s.temporaries) tensors_.Free(t, op.alloc_at_start);
    AfterReduction(s.unit, Add(std::move(op)), s.last_mb);
  }
}

void ProgramBuilder::AfterReduction(int u, int reduced, bool last_mb) {
  if (last_mb && R(u) > 1) {
    // Across replica groups, once per step (DDP's no_sync for earlier
    // micro-batches); the shard was pre-scaled by 1/R, so the sum is the mean.
    StepOp ar;
    ar.kind = OpKind::kAllReduce;
    ar.stream = StreamKind::kReduce;
    ar.group = ReplicaGroupOf(u);
    ar.unit = u;
    ar.micro_batch = static_cast<int>(plan_.grad_accum) - 1;
    ar.name = OpName("all-reduce", u);
    ar.deps = {reduced};
    ar.work.collective = CollectiveOp::kAllReduce;
    ar.work.collective_bytes = 4 * Padded(u) / G(u);
    ar.work.group_size = R(u);
    ar.work.spans_nodes = plan_.gpus > plan_.gpus_per_node;
    reduced = Add(std::move(ar));
  }
  if (!last_mb) return;
  grad_final_[u] = reduced;
  // Staged per unit (Plan::offload_staging): the final gradient goes down
  // now, under the backward still running, while the host is idle.
  if (plan_.StagesEveryUnit()) CopyGradientsToHost(u, reduced);
}

}  // namespace llmplan
