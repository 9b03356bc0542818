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
    const bool block = U(u).kind == UnitKind::kBlock;
    // The embedding's backward is a scatter-add of output gradients: it
    // needs no weights, so it is never re-gathered.
    int gathered = -1;
    if (GathersParams()) {
      if (KeepsParamsThroughBackward(u)) gathered = gather_fwd_[u];
      else if (U(u).kind != UnitKind::kEmbedding) gathered = Gather(u, mb, true);
    }
    const auto act = BlockActivations(plan_.model, plan_.micro_batch, plan_.seq_len);
    int recompute = -1;
    if (block && plan_.IsCheckpointed(U(u).layer)) {
      StepOp op;
      op.kind = OpKind::kRecompute;
      op.stream = StreamKind::kCompute;
      op.unit = u;
      op.micro_batch = mb;
      op.name = "recompute " + UnitName(u) + MbSuffix(mb);
      FillForwardWork(u, op.work);
      op.deps = {gathered, previous};
      op.alloc_at_start.push_back({MemoryCategory::kRecompute, act.full - act.checkpointed});
      recompute = Add(op);
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
    op.name = "backward " + UnitName(u) + MbSuffix(mb);
    FillForwardWork(u, op.work);
    op.work.gemm_flops *= 2;          // dX and dW
    op.work.attention_flops *= 2.5;   // flash backward: five matmuls to forward's two
    op.work.attention_backward = true;
    op.work.elementwise_bytes *= 2;
    op.work.launches *= 2;
    op.deps = {gathered, recompute, previous, throttle};
    // The unsharded gradient in the compute dtype. Tied embedding: the head's
    // backward produces the shared matrix's gradient, so the embedding's
    // buffer is allocated there (and freed by the embedding's own reduction).
    auto compute_grad_bytes = [&](int unit) { return ParamBytes() * Padded(unit); };
    double allocated = TiedEmbedding(u) ? 0 : compute_grad_bytes(u);
    if (U(u).kind == UnitKind::kHead && plan_.model.tied_embeddings) allocated += compute_grad_bytes(0);
    if (allocated > 0) op.alloc_at_start.push_back({MemoryCategory::kGradBuffers, allocated});
    double working = 0;
    if (block) working = act.working;
    if (U(u).kind == UnitKind::kHead) working = LogitsBytes();
    const MemoryCategory wcat = U(u).kind == UnitKind::kHead ? MemoryCategory::kLogits : MemoryCategory::kWorkspace;
    if (working > 0) {
      op.alloc_at_start.push_back({wcat, working});
      op.free_at_end.push_back({wcat, -working});
    }
    const double stored = StoredBytes(u);
    if (stored > 0) op.free_at_end.push_back({MemoryCategory::kActivations, -stored});
    if (recompute >= 0) op.free_at_end.push_back({MemoryCategory::kRecompute, -(act.full - act.checkpointed)});
    const int bwd = Add(op);
    previous = bwd;
    if (gathered >= 0) Release(u, mb, bwd, true);
    ReduceGradients(u, mb, bwd, compute_grad_bytes(u), last_mb);
  }
}

void ProgramBuilder::ReduceGradients(int u, int mb, int bwd, double compute_grad_bytes, bool last_mb) {
  if (G() == 1) {
    // One copy of the state per rank: the compute-dtype gradient is added
    // into the fp32 one right away and its buffer released.
    StepOp op;
    op.kind = OpKind::kLocalReduce;
    op.stream = StreamKind::kCompute;
    op.unit = u;
    op.micro_batch = mb;
    op.name = "reduce-local " + UnitName(u) + MbSuffix(mb);
    op.deps = {bwd};
    // Read the compute-dtype gradient, read and write the fp32 one.
    op.work.elementwise_bytes = Padded(u) * (ParamBytes() + 8);
    op.work.launches = 2;
    if (last_mb && R() > 1) op.gradient_scale = 1.0 / R();
    op.free_at_end.push_back({MemoryCategory::kGradBuffers, -compute_grad_bytes});
    AfterReduction(u, mb, Add(op), last_mb);
    return;
  }
  // The compute-dtype gradient is cast to the reduce dtype (a private copy the
  // collective reads, with the reduced shard beside it) and released.
  const double copy = ReduceBytes() * Padded(u), shard = ReduceBytes() * Padded(u) / G();
  StepOp rs;
  rs.kind = OpKind::kReduceScatter;
  rs.stream = StreamKind::kReduce;
  rs.group = CommGroup::kShard;
  rs.unit = u;
  rs.micro_batch = mb;
  rs.name = "reduce-scatter " + UnitName(u) + MbSuffix(mb);
  rs.deps = {bwd};
  rs.work.collective = CollectiveOp::kReduceScatter;
  rs.work.collective_bytes = copy;
  rs.work.group_size = G();
  rs.work.spans_nodes = GroupSpansNodes(G());
  rs.alloc_at_start.push_back({MemoryCategory::kGradBuffers, copy + shard});
  rs.free_at_end.push_back({MemoryCategory::kGradBuffers, -compute_grad_bytes});
  const int id = Add(rs);
  reduce_scatters_.push_back(id);
  pending_shards_.push_back({id, u, mb, copy + shard, last_mb});
}

void ProgramBuilder::AccumulateThrough(int rs_id) {
  while (!pending_shards_.empty() && pending_shards_.front().rs <= rs_id) {
    const PendingShard s = pending_shards_.front();
    pending_shards_.erase(pending_shards_.begin());
    StepOp op;
    op.kind = OpKind::kAccumulateShard;
    op.stream = StreamKind::kCompute;
    op.unit = s.unit;
    op.micro_batch = s.mb;
    op.name = "accumulate " + UnitName(s.unit) + MbSuffix(s.mb);
    op.deps = {s.rs};
    // Read the reduced shard, read and write the fp32 gradient shard.
    op.work.elementwise_bytes = Padded(s.unit) / G() * (ReduceBytes() + 8);
    op.work.launches = 1;
    if (s.last_mb && R() > 1) op.gradient_scale = 1.0 / R();
    op.free_at_end.push_back({MemoryCategory::kGradBuffers, -s.bytes});
    AfterReduction(s.unit, s.mb, Add(op), s.last_mb);
  }
}

void ProgramBuilder::AfterReduction(int u, int mb, int reduced, bool last_mb) {
  if (last_mb && R() > 1) {
    // Across replica groups, once per step (DDP's no_sync for earlier
    // micro-batches); the shard was pre-scaled by 1/R, so the sum is the mean.
    StepOp ar;
    ar.kind = OpKind::kAllReduce;
    ar.stream = StreamKind::kReduce;
    ar.group = CommGroup::kReplica;
    ar.unit = u;
    ar.micro_batch = static_cast<int>(plan_.grad_accum) - 1;
    ar.name = "all-reduce " + UnitName(u);
    ar.deps = {reduced};
    ar.work.collective = CollectiveOp::kAllReduce;
    ar.work.collective_bytes = 4 * Padded(u) / G();
    ar.work.group_size = R();
    ar.work.spans_nodes = plan_.gpus > plan_.gpus_per_node;
    reduced = Add(ar);
  }
  if (OffloadsParams(plan_.offload) && OffloadsOptimizer(plan_.offload)) {
    // Gradient shards go to the host after every micro-batch (accumulated
    // there, where the CPU optimizer reads them).
    StepOp copy;
    copy.kind = OpKind::kCopyToHost;
    copy.stream = StreamKind::kDeviceToHost;
    copy.unit = u;
    copy.micro_batch = mb;
    copy.name = "d2h grads " + UnitName(u) + MbSuffix(mb);
    copy.deps = {reduced};
    copy.work.copy_bytes = 4 * Padded(u) / G();
    reduced = Add(copy);
  }
  if (last_mb) grad_final_[u] = reduced;
}

}  // namespace llmplan
