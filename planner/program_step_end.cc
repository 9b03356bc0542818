// ProgramBuilder, end of the step: the global gradient norm and clipping,
// the AdamW update on the GPU, and the step's loss over every rank; and the
// offloaded optimizer's ops, which the forward and backward phases place
// (see program_builder.h).
#include "planner/program_builder.h"

namespace llmplan {

void ProgramBuilder::ClipGradients() {
  const int n = NumUnits();
  // The norm reads the gradients whose reduction did not already sum their squares.
  double shard_params = 0;
  int read_units = 0;
  for (int u = 0; u < n; ++u) {
    if (squares_in_reduction_[u]) continue;
    shard_params += Shard(u);
    ++read_units;
  }
  AccumulateThrough(reduce_scatters_.empty() ? -1 : reduce_scatters_.back());
  // Clipping needs the global gradient norm: every reduction must be in.
  StepOp norm;
  norm.kind = OpKind::kGradNorm;
  norm.stream = StreamKind::kCompute;
  norm.name = "grad norm";
  for (int u = 0; u < n; ++u) norm.deps.push_back(grad_final_[u]);
  norm.work.elementwise_bytes = 4 * shard_params;
  norm.work.launches = 2 * read_units + 2;  // a norm and a square per unit read; the stack and the sum
  int last = Add(std::move(norm));
  if (G() > 1) {
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
    ar.work.group_size = G();
    ar.work.spans_nodes = GroupSpansNodes(G());
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
  clip_ = Add(std::move(clip));
}

void ProgramBuilder::OptimizerStep() {
  // The offloaded optimizer has no ops here: the next step's first forward
  // brings its gradients down and the host applies them (UpdateOnHost).
  if (OffloadsOptimizer(plan_.offload)) return;
  const bool master_on_host = OffloadsParams(plan_.offload);
  const bool scales_before_adamw = plan_.optimizer.grad_clip > 0 && profile_.device_kind == "cpu";
  // Offload params: unit u + 1's master comes up while unit u's goes back
  // down (the copy engines run both directions at once), so it is issued
  // before that copy down. Issued after it, its copy stream waited for the
  // compute stream, which waits for the copy down (the staging reuse below):
  // the two directions ran one after the other, 1.16 s exposed of a 7.05 s
  // Llama-3-8B step on one H200 (predicted 0.64 s, 2026-12-02).
  auto master_up = [&](int u) {
    StepOp in = HostCopy(OpKind::kCopyMasterToDevice, u, "h2d master", 4 * Shard(u));
    // Not before backward is over: a master copied in earlier would sit
    // in its staging buffer through the activation peak.
    in.deps = {clip_};
    in.alloc_at_start.push_back({MemoryCategory::kOffloadStaging, 4 * Shard(u)});
    return Add(std::move(in));
  };
  int master_in = master_on_host && NumUnits() > 0 ? master_up(0) : -1;
  int master_down = -1;  // the previous unit's copy down
  for (int u = 0; u < NumUnits(); ++u) {
    const double shard = Shard(u);
    StepOp op;
    op.kind = OpKind::kOptimizerStep;
    op.stream = StreamKind::kCompute;
    op.unit = u;
    op.name = OpName("adamw", u);
    // With the master on the host the compute stream also waits for the
    // previous unit's copy down: its staging bytes go back to the compute
    // stream's pool for this unit's to reuse (the executor's CopyGradsToHost).
    op.deps = {clip_, master_in, master_down};
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
      tensors_.Free(compute_grad_[u], op.alloc_at_start);
      compute_grad_[u] = -1;
    }
    const int step = Add(std::move(op));
    if (master_on_host) {
      master_in = u + 1 < NumUnits() ? master_up(u + 1) : -1;
      StepOp out = HostCopy(OpKind::kCopyMasterToHost, u, "d2h master", 4 * shard);
      out.deps = {step};
      out.free_at_end.push_back({MemoryCategory::kOffloadStaging, -4 * shard});
      master_down = Add(std::move(out));
    }
  }
}

void ProgramBuilder::CopyGradientsToHost(int u, int after) {
  // The final gradient shard, unclipped (the host update applies the
  // clipping factor as it reads it, AdamWScalars::grad_scale, so the device
  // never rescales its gradients). Staged per unit it goes down as soon as
  // it is final, `after` its last reduction, under the backward still
  // running. Through the slots it waits in the device's fp32 gradient buffer
  // until the next step: that step's first reduction overwrites it only
  // after the unit's forward, which waits for the update that reads this
  // copy (delayed update: the reduction waits for this copy itself). It is
  // copied under the host update of the unit before, into the slot that
  // update `after` has finished reading.
  StepOp copy = HostCopy(OpKind::kCopyGradsToHost, u, "d2h grads", 4 * Shard(u));
  copy.deps = {after};
  grad_down_[u] = Add(std::move(copy));
}

StepOp ProgramBuilder::CpuAdamWOp(int u) const {
  StepOp cpu;
  cpu.kind = OpKind::kCpuOptimizerStep;
  cpu.stream = StreamKind::kCpu;
  cpu.unit = u;
  cpu.name = OpName("cpu adamw", u);
  cpu.work.cpu_adam_params = Shard(u);
  cpu.work.host_sharers = plan_.GpusOnNode();
  if (plan_.OptimizerStateOnNvme()) cpu.work.nvme_bytes = 8 * Shard(u);
  return cpu;
}

void ProgramBuilder::UpdateOnHost(int u) {
  // The previous step's gradients, so the update depends on nothing computed
  // in this step: exact, as if it had run at the end of the previous step.
  // It holds the host (rule 4), so the host runs it between issuing unit
  // u - 1's forward and unit u's: the GPU computes while the host updates.
  // Run after the clipping instead, with the forward waiting for the last
  // update, the whole CPU AdamW is exposed (1.25 s of a 2.7 s step,
  // Llama-3.2-3B on one H200, 2026-12-01).
  const int n = NumUnits(), slots = kOffloadStagingSlots;
  const bool through_slots = !plan_.StagesEveryUnit();
  if (through_slots && u == 0)
    for (int v = 0; v < std::min(slots, n); ++v) CopyGradientsToHost(v, -1);
  const bool copies_up = !OffloadsParams(plan_.offload);
  StepOp cpu = CpuAdamWOp(u);
  // Staged per unit, the gradient came down in the previous step and the
  // update writes the unit's own buffer: nothing to wait for. Through the
  // slots: its gradient is down; the compute-dtype slot it writes has gone up.
  if (through_slots) cpu.deps = {grad_down_[u], copies_up && u >= slots ? update_ready_[u - slots] : -1};
  update_ready_[u] = Add(std::move(cpu));
  // The gradient slot this update read is free: the next unit's to use it
  // comes down while the host updates unit u + 1.
  if (through_slots && u + slots < n) CopyGradientsToHost(u + slots, update_ready_[u]);
  // With the parameters streamed (optimizer+params) the update writes the
  // host copy that the gathers bring up themselves.
  if (!copies_up) return;
  StepOp back = HostCopy(OpKind::kCopyParamsToDevice, u, "h2d params", ParamBytes() * Shard(u));
  back.deps = {update_ready_[u]};
  update_ready_[u] = Add(std::move(back));
}

void ProgramBuilder::DelayedUpdateOnHost(int u, int bwd) {
  // Step N - 1's gradient applied while step N computes on the parameters
  // that gradient was not taken at (ZeRO-Offload's delayed parameter update).
  // In backward order the host work tracks the GPU's: it runs while the
  // backward of the unit below (issued next) computes, and each unit's new
  // parameters go up as soon as this step's backward has used the old ones.
  // Run beside the first forward instead, as UpdateOnHost does, the update
  // of unit u + 1 must end before unit u + 1's forward: on Llama-3-8B on one
  // H200 the host's 72 ms per block against the forward's 44 ms exposed
  // 1.41 s of a 7.74 s step (2026-12-02).
  const int n = NumUnits(), slots = kOffloadStagingSlots;
  StepOp cpu = CpuAdamWOp(u);
  // Its gradient is down; the compute-dtype slot it writes has gone up (the
  // unit `slots` earlier in backward order used it).
  cpu.deps = {grad_down_[u], u + slots < n ? update_ready_[u + slots] : -1};
  const int update = Add(std::move(cpu));
  // The gradient slot it read is free for the unit `slots` further down.
  if (u - slots >= 0) CopyGradientsToHost(u - slots, update);
  StepOp up = HostCopy(OpKind::kCopyParamsToDevice, u, "h2d params", ParamBytes() * Shard(u));
  up.deps = {update, bwd};  // not before this step's backward has read the old parameters
  update_ready_[u] = Add(std::move(up));
}

void ProgramBuilder::LossAllReduce() {
  if (plan_.gpus <= 1) return;
  // The reported loss is the mean over every rank's tokens (equal counts):
  // one scalar summed over the world, read by the host after the step.
  StepOp op;
  op.kind = OpKind::kAllReduceLoss;
  op.stream = StreamKind::kReduce;
  op.group = CommGroup::kWorld;
  op.name = "all-reduce step loss";
  op.deps = {last_loss_};
  op.work.collective = CollectiveOp::kAllReduce;
  op.work.collective_bytes = 4;
  op.work.group_size = plan_.gpus;
  op.work.spans_nodes = plan_.gpus > plan_.gpus_per_node;
  Add(std::move(op));
}

}  // namespace llmplan
