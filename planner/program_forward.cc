// ProgramBuilder, forward phase: gather each unit's parameters, run its
// forward, release what backward will gather again (see program_builder.h).
#include <algorithm>
#include <cmath>

#include "planner/memory_model.h"
#include "planner/work_model.h"

#include "planner/program_builder.h"

namespace llmplan {

BlockActivationBytes BlockActivations(const Plan& plan, const HardwareProfile& profile) {
  const ActivationShape a = ShapeOf(plan.model, plan.micro_batch, plan.seq_len, DTypeBytes(plan.param_dtype),
                                    plan.loss_chunk_tokens, profile.device_kind == "cpu", plan.fused_kernels);
  TensorRegistry tensors;
  auto net = [](const MemoryScript& s) {
    double sum = 0;
    for (const auto& d : s.events) sum += d.bytes;
    return sum;
  };
  auto highest = [](const MemoryScript& s) {
    double now = 0, top = 0;
    for (const auto& d : s.events) top = std::max(top, now += d.bytes);
    return top;
  };
  BlockActivationBytes b;
  MemoryScript forward(tensors), checkpointed(tensors), backward(tensors);
  const SavedTensors saved = BlockForward(a, true, forward);
  b.full = net(forward);
  const SavedTensors kept = BlockForward(a, false, checkpointed);
  b.checkpointed = net(checkpointed);
  const int flowing = tensors.Add(MemoryCategory::kActivations, 0);
  BlockBackward(a, saved, flowing, backward);
  b.working = highest(backward);
  MemoryScript head(tensors);
  const double matrix = static_cast<double>(plan.model.vocab * plan.model.hidden);
  HeadForward(a, matrix, head);
  // The fused form's loss adds into the flat gradient the program allocates
  // at the head's forward: the same bytes the composite form's own buffer takes.
  b.head = highest(head) + (a.fused_kernels ? a.compute_bytes * matrix : 0);
  (void)kept;
  return b;
}

int ProgramBuilder::Gather(int u, int mb, bool backward) {
  const double bytes = ParamBytes() * Padded(u);
  StepOp op;
  // Up to two releases, the copy from the host and the compute op that
  // ToIssueOrder adds: reserved once (a gather's deps were three allocations).
  std::vector<int>& deps = op.deps;
  deps.reserve(4);
  const bool kept = !backward && KeepsParamsThroughBackward(u);
  if (!kept && in_flight_.size() > static_cast<size_t>(plan_.prefetch_depth)) {
    deps.push_back(release_of_[in_flight_.front()]);  // its use comes earlier, so its release exists
    in_flight_.pop_front();
  }
  deps.push_back(last_release_of_unit_[u]);  // the unit's buffer is reused
  if (mb == 0 && !backward) deps.push_back(update_ready_[u]);  // the step's first use of the updated shard
  const bool params_offloaded = OffloadsParams(plan_.offload) && OffloadsOptimizer(plan_.offload);
  if (params_offloaded) {
    // The bf16 shard streams in from the host just before its gather.
    StepOp copy = HostCopy(OpKind::kCopyParamsForGather, u, "h2d params", bytes / G(u), mb, backward);
    copy.alloc_at_start.push_back({MemoryCategory::kOffloadStaging, bytes / G(u)});
    copy.deps.reserve(deps.size() + 1);
    copy.deps.assign(deps.begin(), deps.end());
    deps.push_back(Add(std::move(copy)));
  }
  op.kind = OpKind::kAllGather;
  op.stream = StreamKind::kGather;
  op.group = CommGroup::kShard;
  op.unit = u;
  op.micro_batch = mb;
  op.name = OpName("all-gather", u, mb, backward);
  op.work.collective = CollectiveOp::kAllGather;
  op.work.collective_bytes = bytes;
  op.work.group_size = G(u);
  op.work.spans_nodes = GroupSpansNodes(G(u));
  // On one GPU the "gather" is the fp32 -> bf16 cast of the master shard (a
  // copy of the compute-dtype shard when it streamed in from the host). The
  // cast runs on the compute stream (StepInterpreter: FlatUnit::GatherLocal
  // on the current stream), so it is priced there, in line with the unit's
  // compute: on the gather stream the simulator overlapped it (0.44 ms
  // exposed predicted on the 1B one-H200 plan, 3.5 ms measured).
  if (G(u) == 1) {
    op.work.elementwise_bytes = Padded(u) * ((params_offloaded ? ParamBytes() : 4) + ParamBytes());
    op.work.launches = 1;
    if (!params_offloaded) op.stream = StreamKind::kCompute;
  }
  // Plan::cast_at_gather: the collective sends a compute-dtype cast of the
  // fp32 master shard, made on the gather's side stream just before it (read
  // 4 bytes, write 2, per parameter of the shard) and held until it is sent.
  const bool casts = plan_.cast_at_gather && G(u) > 1;
  if (casts) {
    op.work.elementwise_bytes = Shard(u) * (4 + ParamBytes());
    op.work.launches = 1;
    op.alloc_at_start.push_back({MemoryCategory::kGatheredParams, ParamBytes() * Shard(u)});
  }
  gathered_[u] = tensors_.Alloc(MemoryCategory::kGatheredParams, bytes, op.alloc_at_start);
  if (params_offloaded) op.free_at_end.push_back({MemoryCategory::kOffloadStaging, -bytes / G(u)});
  if (casts) op.free_at_end.push_back({MemoryCategory::kGatheredParams, -ParamBytes() * Shard(u)});
  const int id = Add(std::move(op));
  current_gather_[u] = id;
  if (release_of_.size() <= static_cast<size_t>(id)) release_of_.resize(static_cast<size_t>(id) + 1, -1);
  if (!kept) in_flight_.push_back(id);
  return id;
}

int ProgramBuilder::Release(int u, int mb, int after, bool backward) {
  StepOp op;
  op.kind = OpKind::kRelease;
  op.stream = StreamKind::kCompute;
  op.unit = u;
  op.micro_batch = mb;
  op.name = OpName("release", u, mb, backward);
  op.deps = {after};
  tensors_.Free(gathered_[u], op.alloc_at_start);
  gathered_[u] = -1;
  const int id = Add(std::move(op));
  last_release_of_unit_[u] = id;
  release_of_[current_gather_[u]] = id;
  current_gather_[u] = -1;
  return id;
}

void ProgramBuilder::FillForwardWork(int u, OpWork& w) const {
  switch (U(u).kind) {
    case UnitKind::kEmbedding: w = EmbeddingForwardWork(shape_); break;
    case UnitKind::kBlock: w = BlockForwardWork(shape_); break;
    case UnitKind::kHead: w = HeadForwardWork(shape_); break;
  }
}

void ProgramBuilder::MakeComputeGrad(int u, StepOp& op) {
  if (compute_grad_[u] >= 0) return;
  compute_grad_[u] = tensors_.Alloc(MemoryCategory::kGradBuffers, ParamBytes() * Padded(u), op.alloc_at_start);
  // Zeroed where it is made (FlatUnit::MaterializeComputeGrad: autograd and
  // the GEMMs add into it): one fill kernel over the padded buffer.
  op.work.elementwise_bytes += ParamBytes() * Padded(u);
  op.work.launches += 1;
}

void ProgramBuilder::FillBackwardWork(int u, OpWork& w) const {
  switch (U(u).kind) {
    case UnitKind::kEmbedding: w = EmbeddingBackwardWork(shape_, static_cast<double>(plan_.model.EmbeddingParams())); break;
    case UnitKind::kBlock: w = BlockBackwardWork(shape_, static_cast<double>(plan_.model.ParamsPerBlock())); break;
    case UnitKind::kHead: w = HeadBackwardWork(shape_, OutputMatrixParams()); break;
  }
}

void ProgramBuilder::Forward(int mb) {
  const int n = NumUnits();
  // Offloaded optimizer: the previous step's update runs on the host beside
  // the first forward, one unit ahead of it (UpdateOnHost).
  const bool host_updates = mb == 0 && OffloadsOptimizer(plan_.offload) && !plan_.delayed_update;
  if (host_updates) UpdateOnHost(0);
  // Delayed update: this step runs on the parameters it finds; the first
  // units of the backward bring their previous gradients down now, under the
  // forward (the rest follow as the updates free the slots).
  if (mb == 0 && plan_.delayed_update)
    for (int u = n - 1; u >= std::max(0, n - kOffloadStagingSlots); --u) CopyGradientsToHost(u, -1);
  for (int u = 0; u < n; ++u) {
    if (GathersParams(u)) gather_fwd_[u] = Gather(u, mb, false);
    if (host_updates && u + 1 < n) UpdateOnHost(u + 1);
    StepOp op;
    op.kind = OpKind::kForward;
    op.stream = StreamKind::kCompute;
    op.unit = u;
    op.micro_batch = mb;
    op.name = OpName("forward", u, mb);
    FillForwardWork(u, op.work);
    op.deps = {GathersParams(u) ? gather_fwd_[u] : -1, u > 0 ? last_forward_[u - 1] : -1};
    if (host_updates && !GathersParams(u)) op.deps.push_back(update_ready_[u]);  // a resident copy, written in place
    MemoryCall call = MemoryCall::kHeadForward;
    switch (U(u).kind) {
      case UnitKind::kEmbedding: call = MemoryCall::kEmbeddingForward; break;
      case UnitKind::kBlock: call = Recomputed(u) ? MemoryCall::kBlockForwardNoGraph : MemoryCall::kBlockForward; break;
      case UnitKind::kHead: call = MemoryCall::kHeadForward; break;
    }
    // The fused form's loss adds its weight gradient straight into the flat
    // gradient of the unit holding the output weight (the embedding's when
    // tied): it exists from this forward on (the executor's Forward makes it
    // first, as here), and the head's backward finds it made.
    if (U(u).kind == UnitKind::kHead && shape_.fused_kernels) MakeComputeGrad(plan_.model.tied_embeddings ? 0 : u, op);
    CallMemoryModel(call, {}, op.alloc_at_start, saved_[u]);
    last_forward_[u] = Add(std::move(op));
    if (U(u).kind == UnitKind::kHead) last_loss_ = last_forward_[u];
    if (GathersParams(u) && !KeepsParamsThroughBackward(u)) Release(u, mb, last_forward_[u], false);
  }
}

}  // namespace llmplan
