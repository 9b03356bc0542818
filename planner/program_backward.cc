// ProgramBuilder, backward phase: recompute checkpointed blocks, run each
// unit's backward from the head down, reduce its gradient (see
// program_builder.h).
#include "planner/program_builder.h"
#include "planner/work_model.h"

namespace llmplan {

namespace {

OpWork BackwardWork(UnitKind kind, const ActivationShape& shape, const ModelSpec& model, double output_matrix) {
  switch (kind) {
    case UnitKind::kEmbedding: return EmbeddingBackwardWork(shape, static_cast<double>(model.EmbeddingParams()));
    case UnitKind::kBlock: return BlockBackwardWork(shape, static_cast<double>(model.ParamsPerBlock()));
    case UnitKind::kHead: return HeadBackwardWork(shape, output_matrix);
  }
  return {};
}

MemoryCall BackwardCall(UnitKind kind) {
  switch (kind) {
    case UnitKind::kHead: return MemoryCall::kHeadBackward;
    case UnitKind::kBlock: return MemoryCall::kBlockBackward;
    case UnitKind::kEmbedding: return MemoryCall::kEmbeddingBackward;
  }
  return MemoryCall::kEmbeddingBackward;
}

// The group a unit's gradient all-reduce runs in: the replica group, or the
// whole job for an edge unit kept whole under a sharded strategy.
CommGroup ReplicaGroupOf(const Unit& unit, const Plan& plan) {
  return unit.resident && plan.strategy != ShardingStrategy::kNoShard ? CommGroup::kWorld : CommGroup::kReplica;
}

}  // namespace

void ProgramBuilder::Backward(int mb, ForwardResults& results) {
  const int n = NumUnits();
  const bool last_mb = mb == plan_.grad_accum - 1;
  int previous = results.forward[n - 1];
  int flowing = -1;  // the gradient passed down
  for (int u = n - 1; u >= 0; --u) {
    std::vector<int>& saved = results.saved[u];  // this micro-batch's forward's (or recompute's) tensors
    const int gathered = GatherForBackward(u, mb, results);
    const int recompute = Recomputed(u) ? Recompute(u, mb, {gathered, previous}, saved) : -1;
    const int throttle = ThrottleReductions();
    const int bwd = UnitBackward(u, mb, {gathered, recompute, previous, throttle}, saved, flowing);
    previous = bwd;
    if (gathered >= 0) Release(u, mb, bwd, true);
    if (ShardGroup(u) == 1) ReduceLocally(u, mb, bwd, last_mb);
    else ReduceScatter(u, mb, bwd, last_mb);
    if (plan_.delayed_update) DelayedUpdateOnHost(u, bwd);
  }
}

int ProgramBuilder::GatherForBackward(int u, int mb, const ForwardResults& results) {
  if (!GathersParams(u)) return -1;
  if (KeepsParamsThroughBackward(u)) return results.gather[u];
  // The embedding's backward is a scatter-add of output gradients: it
  // needs no weights, so it is never re-gathered.
  if (UnitAt(u).kind == UnitKind::kEmbedding) return -1;
  return Gather(u, mb, true);
}

int ProgramBuilder::Recompute(int u, int mb, std::vector<int> deps, std::vector<int>& saved) {
  StepOp op;
  op.kind = OpKind::kRecompute;
  op.stream = StreamKind::kCompute;
  op.unit = u;
  op.micro_batch = mb;
  op.name = OpName("recompute", u, mb);
  op.work = BlockForwardWork(shape_);
  op.deps = std::move(deps);
  CallMemoryModel(MemoryCall::kBlockRecompute, saved, op.alloc_at_start, call_result_);
  saved.swap(call_result_);
  return Add(std::move(op));
}

int ProgramBuilder::ThrottleReductions() {
  if (grads_.reduce_scatters.size() < 2) return -1;
  const int throttle = grads_.reduce_scatters[grads_.reduce_scatters.size() - 2];
  AccumulateThrough(throttle);
  return throttle;
}

int ProgramBuilder::UnitBackward(int u, int mb, std::vector<int> deps, std::vector<int>& saved, int& flowing) {
  const UnitKind kind = UnitAt(u).kind;
  StepOp op;
  op.kind = OpKind::kBackward;
  op.stream = StreamKind::kCompute;
  op.unit = u;
  op.micro_batch = mb;
  op.name = OpName("backward", u, mb);
  op.work = BackwardWork(kind, shape_, plan_.model, OutputMatrixParams());
  op.deps = std::move(deps);
  // The backward's memory model call: on the forward's tensors and the
  // gradient flowing in from the unit above (the head's backward starts it).
  call_inputs_.assign(saved.begin(), saved.end());
  if (kind != UnitKind::kHead) call_inputs_.push_back(flowing);
  const MemoryTemplate& recorded = memory_calls_.Recorded(BackwardCall(kind), call_inputs_);
  std::vector<MemoryDelta>& events = op.alloc_at_start;
  events.reserve(recorded.events.size() + 4);  // and the gradient buffers' events around it
  // The unsharded gradient in the compute dtype exists from the backward
  // that first writes it (a tied embedding's from the head's; the fused
  // loss's holder from the head's forward) to its reduction.
  MakeComputeGrad(u, op);
  if (kind == UnitKind::kHead && plan_.model.tied_embeddings) MakeComputeGrad(0, op);
  tensors_.Stamp(recorded, call_inputs_, events, call_result_);
  flowing = call_result_.empty() ? -1 : call_result_[0];  // the embedding's sends none
  saved.clear();
  if (ShardGroup(u) > 1) {
    // Cast for the reduce-scatter (its private input), then the
    // compute-dtype buffer goes back to the allocator.
    grads_.reduce_input[u] = tensors_.Alloc(MemoryCategory::kGradBuffers, ReduceBytes() * PaddedParams(u), events);
    tensors_.Free(grads_.compute[u], events);
    grads_.compute[u] = -1;
  }
  return Add(std::move(op));
}

void ProgramBuilder::ReduceLocally(int u, int mb, int bwd, bool last_mb) {
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
  op.deps = {bwd, plan_.delayed_update && mb == 0 ? host_.grad_down[u] : -1};
  // Read the compute-dtype gradient, read and write the fp32 one — except
  // the step's first contribution, which only writes it
  // (FlatUnit::AccumulateIntoGrad).
  op.work.elementwise_bytes = PaddedParams(u) * (ParamBytes() + (mb == 0 ? 4 : 8));
  op.work.launches = 2;
  if (last_mb && Replicas(u) > 1) op.gradient_scale = 1.0 / Replicas(u);
  // On a GPU the bf16 gradient is widened by llmplan's kernel, whose last
  // pass of the step also sums the squares for the grad norm (one more
  // launch: the blocks' partial sums).
  if (last_mb && op.gradient_scale == 1.0 && profile_.device_kind != "cpu" && ParamBytes() == 2) {
    grads_.squares_summed[u] = true;
    op.work.launches += 1;
  }
  if (AdamWReadsComputeGrad()) {
    // Nothing to widen: the pass only reads the gradient for its squares,
    // and the gradient stays for AdamW, which frees it (OptimizerStep).
    op.work.elementwise_bytes = PaddedParams(u) * ParamBytes();
  } else {
    tensors_.Free(grads_.compute[u], op.alloc_at_start);
    grads_.compute[u] = -1;
  }
  AfterReduction(u, Add(std::move(op)), last_mb);
}

void ProgramBuilder::ReduceScatter(int u, int mb, int bwd, bool last_mb) {
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
  rs.work.collective_bytes = ReduceBytes() * PaddedParams(u);
  rs.work.group_size = ShardGroup(u);
  rs.work.spans_nodes = GroupSpansNodes(ShardGroup(u));
  rs.work.spans_islands = GroupSpansIslands(ShardGroup(u));
  const int shard =
      tensors_.Alloc(MemoryCategory::kGradBuffers, ReduceBytes() * PaddedParams(u) / ShardGroup(u), rs.alloc_at_start);
  const int id = Add(std::move(rs));
  grads_.reduce_scatters.push_back(id);
  grads_.pending.push_back({id, u, mb, {grads_.reduce_input[u], shard}, last_mb});
  grads_.reduce_input[u] = -1;
}

void ProgramBuilder::AccumulateThrough(int rs_id) {
  while (grads_.pending_head < grads_.pending.size() && grads_.pending[grads_.pending_head].rs <= rs_id) {
    const PendingShard s = grads_.pending[grads_.pending_head++];
    StepOp op;
    op.kind = OpKind::kAccumulateShard;
    op.stream = StreamKind::kCompute;
    op.unit = s.unit;
    op.micro_batch = s.mb;
    op.name = OpName("accumulate", s.unit, s.mb);
    op.deps = {s.rs, plan_.delayed_update && s.mb == 0 ? host_.grad_down[s.unit] : -1};  // as in ReduceLocally
    // Read the reduced shard, read and write the fp32 gradient shard (only
    // write it for the step's first micro-batch).
    op.work.elementwise_bytes = PaddedParams(s.unit) / ShardGroup(s.unit) * (ReduceBytes() + (s.mb == 0 ? 4 : 8));
    op.work.launches = 1;
    if (s.last_mb && Replicas(s.unit) > 1) op.gradient_scale = 1.0 / Replicas(s.unit);
    for (int t : s.temporaries) tensors_.Free(t, op.alloc_at_start);
    AfterReduction(s.unit, Add(std::move(op)), s.last_mb);
  }
}

void ProgramBuilder::AfterReduction(int u, int reduced, bool last_mb) {
  if (last_mb && Replicas(u) > 1) {
    // Across replica groups, once per step (DDP's no_sync for earlier
    // micro-batches); the shard was pre-scaled by 1/R, so the sum is the mean.
    StepOp ar;
    ar.kind = OpKind::kAllReduce;
    ar.stream = StreamKind::kReduce;
    ar.group = ReplicaGroupOf(UnitAt(u), plan_);
    ar.unit = u;
    ar.micro_batch = static_cast<int>(plan_.grad_accum) - 1;
    ar.name = OpName("all-reduce", u);
    ar.deps = {reduced};
    ar.work.collective = CollectiveOp::kAllReduce;
    ar.work.collective_bytes = 4 * PaddedParams(u) / ShardGroup(u);
    ar.work.group_size = Replicas(u);
    ar.work.spans_nodes = plan_.gpus > plan_.gpus_per_node;
    ar.work.spans_islands = GroupSpansIslands(Replicas(u), ShardGroup(u));
    reduced = Add(std::move(ar));
  }
  if (!last_mb) return;
  grads_.final_op[u] = reduced;
  // Staged per unit (Plan::offload_staging): the final gradient goes down
  // now, under the backward still running, while the host is idle.
  if (plan_.StagesEveryUnit()) CopyGradientsToHost(u, reduced);
}

}  // namespace llmplan
