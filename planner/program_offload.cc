// ProgramBuilder, the offloaded optimizer (Plan::offload optimizer or
// optimizer+params): the gradient copies down to the host staging, the CPU
// AdamW updates and the updated parameters' copies up. The forward and the
// backward place them (see program_builder.h):
//   - by default the previous step's update runs beside this step's first
//     forward, one unit ahead of it (UpdateOnHost, called by Forward);
//   - with Plan::delayed_update it runs in backward order, right after each
//     unit's backward (DelayedUpdateOnHost, called by Backward).
// The gradient copies go through the staging slots (kOffloadStagingSlots)
// or, staged per unit, down as soon as each gradient is final.
#include <algorithm>

#include "planner/program_builder.h"

namespace llmplan {

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
  // update `after` has finished reading (-1: a free slot, at the step's start).
  StepOp copy = HostCopy(OpKind::kCopyGradsToHost, u, "d2h grads", 4 * ShardParams(u));
  copy.deps = {after};
  host_.grad_down[u] = Add(std::move(copy));
}

StepOp ProgramBuilder::CpuAdamWOp(int u) const {
  // The host update of unit u's shard (CPU AdamW, its m and v streamed from
  // NVMe when they live there), priced; its deps are the caller's.
  StepOp cpu;
  cpu.kind = OpKind::kCpuOptimizerStep;
  cpu.stream = StreamKind::kCpu;
  cpu.unit = u;
  cpu.name = OpName("cpu adamw", u);
  cpu.work.cpu_adam_params = ShardParams(u);
  cpu.work.host_sharers = plan_.GpusOnNode();
  if (plan_.OptimizerStateOnNvme()) cpu.work.nvme_bytes = 8 * ShardParams(u);
  return cpu;
}

void ProgramBuilder::UpdateOnHost(int u) {
  // The host update of unit u from its staging, and the updated
  // compute-dtype shard back up: the first forward waits for it. The
  // previous step's gradients, so the update depends on nothing computed in
  // this step: exact, as if it had run at the end of the previous step. It
  // holds the host (rule 4), so the host runs it between issuing unit
  // u - 1's forward and unit u's: the GPU computes while the host updates.
  // Run after the clipping instead, with the forward waiting for the last
  // update, the whole CPU AdamW would be exposed (1.25 s of a 2.7 s step,
  // Llama-3.2-3B on one H200).
  const int n = NumUnits(), slots = kOffloadStagingSlots;
  const bool through_slots = !plan_.StagesEveryUnit();
  if (through_slots && u == 0)
    for (int v = 0; v < std::min(slots, n); ++v) CopyGradientsToHost(v, -1);
  const bool copies_up = !OffloadsParams(plan_.offload);
  StepOp cpu = CpuAdamWOp(u);
  // Staged per unit, the gradient came down in the previous step and the
  // update writes the unit's own buffer: nothing to wait for. Through the
  // slots: its gradient is down; the compute-dtype slot it writes has gone up.
  if (through_slots) cpu.deps = {host_.grad_down[u], copies_up && u >= slots ? host_.params_ready[u - slots] : -1};
  host_.params_ready[u] = Add(std::move(cpu));
  // The gradient slot this update read is free: the next unit's to use it
  // comes down while the host updates unit u + 1.
  if (through_slots && u + slots < n) CopyGradientsToHost(u + slots, host_.params_ready[u]);
  // With the parameters streamed (optimizer+params) the update writes the
  // host copy that the gathers bring up themselves.
  if (!copies_up) return;
  StepOp back = HostCopy(OpKind::kCopyParamsToDevice, u, "h2d params", ParamBytes() * ShardParams(u));
  back.deps = {host_.params_ready[u]};
  host_.params_ready[u] = Add(std::move(back));
}

void ProgramBuilder::CopyFirstSlotsDown() {
  // Delayed update: this step runs on the parameters it finds; the first
  // units of the backward bring their previous gradients down now, under the
  // forward (the rest follow as the updates free the slots).
  const int n = NumUnits();
  for (int u = n - 1; u >= std::max(0, n - kOffloadStagingSlots); --u) CopyGradientsToHost(u, -1);
}

void ProgramBuilder::DelayedUpdateOnHost(int u, int bwd) {
  // Step N - 1's gradient applied while step N computes on the parameters
  // that gradient was not taken at (ZeRO-Offload's delayed parameter update).
  // In backward order the host work tracks the GPU's: it runs while the
  // backward of the unit below (issued next) computes, and each unit's new
  // parameters go up as soon as this step's backward has used the old ones.
  // Run beside the first forward instead, as UpdateOnHost does, the update
  // of unit u + 1 must end before unit u + 1's forward: on Llama-3-8B on one
  // H200 the host's 72 ms per block against the forward's 44 ms would expose
  // 1.41 s of a 7.74 s step.
  const int n = NumUnits(), slots = kOffloadStagingSlots;
  StepOp cpu = CpuAdamWOp(u);
  // Its gradient is down; the compute-dtype slot it writes has gone up (the
  // unit `slots` earlier in backward order used it).
  cpu.deps = {host_.grad_down[u], u + slots < n ? host_.params_ready[u + slots] : -1};
  const int update = Add(std::move(cpu));
  // The gradient slot it read is free for the unit `slots` further down.
  if (u - slots >= 0) CopyGradientsToHost(u - slots, update);
  StepOp up = HostCopy(OpKind::kCopyParamsToDevice, u, "h2d params", ParamBytes() * ShardParams(u));
  up.deps = {update, bwd};  // not before this step's backward has read the old parameters
  host_.params_ready[u] = Add(std::move(up));
}

}  // namespace llmplan
