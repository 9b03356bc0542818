// ProgramBuilder, end of the step: the global gradient norm and clipping,
// the AdamW update on the GPU, and the step's loss over every rank (see
// program_builder.h). The offloaded optimizer's ops are in program_offload.cc.
#include "planner/program_builder.h"

namespace llmplan {

int ProgramBuilder::ClipGradients() {
  int last = GradNorm();
  if (PlanShardGroup() > 1) {
    // Summed over the shard group only: replicas hold identical shards after
    // their all-reduce, so summing over the world would count each R times.
    StepOp ar;
    ar.kind = OpKind::kAllReduceGradNorm;
    ar.stream = StreamKind::kReduce;
    ar.group = CommGroup::kShard;
    ar.name = "all-reduce grad norm";
    ar.deps = {last};
    ar.work.collective = CollectiveOp::kAllReduce;
    ar.work.collective_bytes = 4;
    ar.work.group_size = PlanShardGroup();
    ar.work.spans_nodes = GroupSpansNodes(PlanShardGroup());
    ar.work.spans_islands = GroupSpansIslands(PlanShardGroup());
    last = Add(std::move(ar));
  }
  StepOp clip;
  clip.kind = OpKind::kClipGradients;
  clip.stream = StreamKind::kCompute;
  clip.name = "clip gradients";
  clip.deps = {last};
  // The host reads the norm (a device sync) and computes the factor; AdamW
  // applies it as it reads each gradient — the fused kernel in a register,
  // the CPU AdamW of offload in its loop; only the ATen AdamW of a CPU run
  // scales the gradient first (priced in its AdamW ops, OptimizerStep).
  clip.work.elementwise_bytes = 0;
  clip.work.launches = 0;
  return Add(std::move(clip));
}

int ProgramBuilder::GradNorm() {
  const int n = NumUnits();
  // The norm reads the gradients whose reduction did not already sum their squares.
  double shard_params = 0;
  int read_units = 0;
  for (int u = 0; u < n; ++u) {
    if (grads_.squares_summed[u]) continue;
    shard_params += ShardParams(u);
    ++read_units;
  }
  AccumulateThrough(grads_.reduce_scatters.empty() ? -1 : grads_.reduce_scatters.back());
  // Clipping needs the global gradient norm: every reduction must be in.
  StepOp norm;
  norm.kind = OpKind::kGradNorm;
  norm.stream = StreamKind::kCompute;
  norm.name = "grad norm";
  for (int u = 0; u < n; ++u) norm.deps.push_back(grads_.final_op[u]);
  norm.work.elementwise_bytes = 4 * shard_params;
  norm.work.launches = 2 * read_units + 2;  // a norm and a square per unit read; the stack and the sum
  return Add(std::move(norm));
}

void ProgramBuilder::OptimizerStep(int clip) {
  // The offloaded optimizer has no ops here: the next step's first forward
  // brings its gradients down and the host applies them (UpdateOnHost).
  if (OffloadsOptimizer(plan_.offload)) return;
  const bool master_on_host = OffloadsParams(plan_.offload);
  // Offload params: unit u + 1's master comes up while unit u's goes back
  // down (the copy engines run both directions at once), so it is issued
  // before that copy down. Issued after it, its copy stream would wait for
  // the compute stream, which waits for the copy down (the staging reuse
  // below): the two directions would run one after the other, 1.16 s exposed
  // of a 7.05 s Llama-3-8B step on one H200 (predicted 0.64 s).
  int master_in = master_on_host && NumUnits() > 0 ? CopyMasterUp(0, clip) : -1;
  int master_down = -1;  // the previous unit's copy down
  for (int u = 0; u < NumUnits(); ++u) {
    // With the master on the host the compute stream also waits for the
    // previous unit's copy down: its staging bytes go back to the compute
    // stream's pool for this unit's to reuse (the executor's CopyGradsToHost).
    const int step = AdamW(u, {clip, master_in, master_down});
    if (!master_on_host) continue;
    master_in = u + 1 < NumUnits() ? CopyMasterUp(u + 1, clip) : -1;
    StepOp out = HostCopy(OpKind::kCopyMasterToHost, u, "d2h master", 4 * ShardParams(u));
    out.deps = {step};
    out.free_at_end.push_back({MemoryCategory::kOffloadStaging, -4 * ShardParams(u)});
    master_down = Add(std::move(out));
  }
}

int ProgramBuilder::AdamW(int u, std::vector<int> deps) {
  const double shard = ShardParams(u);
  const bool scales_before_adamw = plan_.optimizer.grad_clip > 0 && profile_.device_kind == "cpu";
  StepOp op;
  op.kind = OpKind::kOptimizerStep;
  op.stream = StreamKind::kCompute;
  op.unit = u;
  op.name = OpName("adamw", u);
  op.deps = std::move(deps);
  // Fused AdamW reads param, grad, m, v (fp32) and writes param, m, v and
  // the bf16 compute copy: 30 bytes per parameter of HBM traffic. A CPU
  // run's ATen AdamW first scales the gradient for clipping (read and
  // write it; priced as if the norm exceeds the limit, as early in training).
  op.work.elementwise_bytes = 30 * shard + (scales_before_adamw ? 8 * shard : 0);
  op.work.launches = 1;
  // No compute copy to write where gathers cast the master themselves (one
  // GPU's full_shard, Plan::cast_at_gather).
  if (!KeepsComputeShard(u)) op.work.elementwise_bytes -= ParamBytes() * shard;
  if (AdamWReadsComputeGrad()) {
    // The gradient is read in the compute dtype (gradient_path.h), and its
    // buffer goes back to the allocator once the update is issued.
    op.work.elementwise_bytes -= (4 - ParamBytes()) * shard;
    tensors_.Free(grads_.compute[u], op.alloc_at_start);
    grads_.compute[u] = -1;
  }
  return Add(std::move(op));
}

int ProgramBuilder::CopyMasterUp(int u, int clip) {
  StepOp in = HostCopy(OpKind::kCopyMasterToDevice, u, "h2d master", 4 * ShardParams(u));
  // Not before backward is over: a master copied in earlier would sit in
  // its staging buffer through the activation peak.
  in.deps = {clip};
  in.alloc_at_start.push_back({MemoryCategory::kOffloadStaging, 4 * ShardParams(u)});
  return Add(std::move(in));
}

void ProgramBuilder::LossAllReduce(int loss) {
  if (plan_.gpus <= 1) return;
  // The reported loss is the mean over every rank's tokens (equal counts):
  // one scalar summed over the world, read by the host after the step.
  StepOp op;
  op.kind = OpKind::kAllReduceLoss;
  op.stream = StreamKind::kReduce;
  op.group = CommGroup::kWorld;
  op.name = "all-reduce step loss";
  op.deps = {loss};
  op.work.collective = CollectiveOp::kAllReduce;
  op.work.collective_bytes = 4;
  op.work.group_size = plan_.gpus;
  op.work.spans_nodes = plan_.gpus > plan_.gpus_per_node;
  op.work.spans_islands = GroupSpansIslands(plan_.gpus);
  Add(std::move(op));
}

}  // namespace llmplan
