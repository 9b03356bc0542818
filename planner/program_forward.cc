// ProgramBuilder, forward phase: gather each unit's parameters, run its
// forward, release what the backward gathers again (see program_builder.h).
#include "planner/program_builder.h"
#include "planner/work_model.h"

namespace llmplan {

namespace {

OpWork ForwardWork(UnitKind kind, const ActivationShape& shape) {
  switch (kind) {
    case UnitKind::kEmbedding: return EmbeddingForwardWork(shape);
    case UnitKind::kBlock: return BlockForwardWork(shape);
    case UnitKind::kHead: return HeadForwardWork(shape);
  }
  return {};
}

MemoryCall ForwardCall(UnitKind kind, bool recomputed) {
  switch (kind) {
    case UnitKind::kEmbedding: return MemoryCall::kEmbeddingForward;
    case UnitKind::kBlock: return recomputed ? MemoryCall::kBlockForwardNoGraph : MemoryCall::kBlockForward;
    case UnitKind::kHead: return MemoryCall::kHeadForward;
  }
  return MemoryCall::kHeadForward;
}

}  // namespace

void ProgramBuilder::Forward(int mb, ForwardResults& results) {
  const int n = NumUnits();
  // Offloaded optimizer: the previous step's update runs on the host beside
  // the first forward, one unit ahead of it (UpdateOnHost).
  const bool host_updates = mb == 0 && OffloadsOptimizer(plan_.offload) && !plan_.delayed_update;
  if (host_updates) UpdateOnHost(0);
  if (mb == 0 && plan_.delayed_update) CopyFirstSlotsDown();
  for (int u = 0; u < n; ++u) {
    if (GathersParams(u)) results.gather[u] = Gather(u, mb, false);
    if (host_updates && u + 1 < n) UpdateOnHost(u + 1);
    const int forward = UnitForward(u, mb, host_updates, results);
    results.forward[u] = forward;
    if (UnitAt(u).kind == UnitKind::kHead) results.loss = forward;
    if (GathersParams(u) && !KeepsParamsThroughBackward(u)) Release(u, mb, forward, false);
  }
}

int ProgramBuilder::UnitForward(int u, int mb, bool waits_for_update, ForwardResults& results) {
  StepOp op;
  op.kind = OpKind::kForward;
  op.stream = StreamKind::kCompute;
  op.unit = u;
  op.micro_batch = mb;
  op.name = OpName("forward", u, mb);
  op.work = ForwardWork(UnitAt(u).kind, shape_);
  op.deps = {GathersParams(u) ? results.gather[u] : -1, u > 0 ? results.forward[u - 1] : -1};
  // A resident copy is written in place by the update.
  if (waits_for_update && !GathersParams(u)) op.deps.push_back(host_.params_ready[u]);
  // The fused form's loss adds its weight gradient straight into the flat
  // gradient of the unit holding the output weight (the embedding's when
  // tied): it exists from this forward on (the executor's Forward makes it
  // first, as here), and the head's backward finds it made.
  if (UnitAt(u).kind == UnitKind::kHead && shape_.fused_kernels) MakeComputeGrad(plan_.model.tied_embeddings ? 0 : u, op);
  CallMemoryModel(ForwardCall(UnitAt(u).kind, Recomputed(u)), {}, op.alloc_at_start, results.saved[u]);
  return Add(std::move(op));
}

int ProgramBuilder::Gather(int u, int mb, bool backward) {
  const double bytes = ParamBytes() * PaddedParams(u);
  StepOp op;
  // Up to two releases, the copy from the host and the compute op that
  // ToIssueOrder adds: reserved once (three allocations otherwise).
  std::vector<int>& deps = op.deps;
  deps.reserve(4);
  const bool kept = !backward && KeepsParamsThroughBackward(u);
  gathered_.AddWaits(u, kept, plan_.prefetch_depth, deps);
  if (mb == 0 && !backward) deps.push_back(host_.params_ready[u]);  // the step's first use of the updated shard
  const bool params_offloaded = OffloadsParams(plan_.offload) && OffloadsOptimizer(plan_.offload);
  const int group = ShardGroup(u);
  if (params_offloaded) deps.push_back(CopyParamsForGather(u, mb, backward, deps));
  op.kind = OpKind::kAllGather;
  op.stream = StreamKind::kGather;
  op.group = CommGroup::kShard;
  op.unit = u;
  op.micro_batch = mb;
  op.name = OpName("all-gather", u, mb, backward);
  op.work.collective = CollectiveOp::kAllGather;
  op.work.collective_bytes = bytes;
  op.work.group_size = group;
  op.work.spans_nodes = GroupSpansNodes(group);
  op.work.spans_islands = GroupSpansIslands(group);
  // On one GPU the "gather" is the fp32 -> bf16 cast of the master shard (a
  // copy of the compute-dtype shard when it streamed in from the host). The
  // cast runs on the compute stream (StepInterpreter: FlatUnit::GatherLocal
  // on the current stream), so it is priced there, in line with the unit's
  // compute: priced on the gather stream, the simulator overlaps it (0.44 ms
  // exposed predicted on the 1B one-H200 plan, 3.5 ms measured).
  if (group == 1) {
    op.work.elementwise_bytes = PaddedParams(u) * ((params_offloaded ? ParamBytes() : 4) + ParamBytes());
    op.work.launches = 1;
    if (!params_offloaded) op.stream = StreamKind::kCompute;
  }
  // Plan::cast_at_gather: the collective sends a compute-dtype cast of the
  // fp32 master shard, made on the gather's side stream just before it (read
  // 4 bytes, write 2, per parameter of the shard) and held until it is sent.
  const bool casts = plan_.cast_at_gather && group > 1;
  if (casts) {
    op.work.elementwise_bytes = ShardParams(u) * (4 + ParamBytes());
    op.work.launches = 1;
    op.alloc_at_start.push_back({MemoryCategory::kGatheredParams, ParamBytes() * ShardParams(u)});
  }
  const int buffer = tensors_.Alloc(MemoryCategory::kGatheredParams, bytes, op.alloc_at_start);
  if (params_offloaded) op.free_at_end.push_back({MemoryCategory::kOffloadStaging, -bytes / group});
  if (casts) op.free_at_end.push_back({MemoryCategory::kGatheredParams, -ParamBytes() * ShardParams(u)});
  const int id = Add(std::move(op));
  gathered_.Gathered(u, id, buffer, kept);
  return id;
}

int ProgramBuilder::CopyParamsForGather(int u, int mb, bool backward, const std::vector<int>& deps) {
  const double bytes = ParamBytes() * PaddedParams(u) / ShardGroup(u);
  StepOp copy = HostCopy(OpKind::kCopyParamsForGather, u, "h2d params", bytes, mb, backward);
  copy.alloc_at_start.push_back({MemoryCategory::kOffloadStaging, bytes});
  copy.deps.reserve(deps.size() + 1);
  copy.deps.assign(deps.begin(), deps.end());
  return Add(std::move(copy));
}

int ProgramBuilder::Release(int u, int mb, int after, bool backward) {
  StepOp op;
  op.kind = OpKind::kRelease;
  op.stream = StreamKind::kCompute;
  op.unit = u;
  op.micro_batch = mb;
  op.name = OpName("release", u, mb, backward);
  op.deps = {after};
  tensors_.Free(gathered_.Buffer(u), op.alloc_at_start);
  const int id = Add(std::move(op));
  gathered_.Released(u, id);
  return id;
}

void ProgramBuilder::MakeComputeGrad(int u, StepOp& op) {
  if (grads_.compute[u] >= 0) return;
  grads_.compute[u] = tensors_.Alloc(MemoryCategory::kGradBuffers, ParamBytes() * PaddedParams(u), op.alloc_at_start);
  // Zeroed where it is made (FlatUnit::MaterializeComputeGrad: autograd and
  // the GEMMs add into it): one fill kernel over the padded buffer.
  op.work.elementwise_bytes += ParamBytes() * PaddedParams(u);
  op.work.launches += 1;
}

}  // namespace llmplan
