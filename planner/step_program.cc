// The public names and helpers of step_program.h: stream, op-kind, group and
// memory-category names, the program's JSON, rule 4 (HostBlocks), and the
// block activation sizes the checkpoint ranking uses.
#include "planner/step_program.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "planner/memory_model.h"

namespace llmplan {

std::string StreamName(StreamKind s) {
  switch (s) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kGather: return "all-gather";
    case StreamKind::kReduce: return "reduce";
    case StreamKind::kHostToDevice: return "host-to-device";
    case StreamKind::kDeviceToHost: return "device-to-host";
    case StreamKind::kCpu: return "cpu";
  }
  return "?";
}

std::string OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kForward: return "forward";
    case OpKind::kRecompute: return "recompute";
    case OpKind::kBackward: return "backward";
    case OpKind::kRelease: return "release";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAccumulateShard: return "accumulate_shard";
    case OpKind::kLocalReduce: return "local_reduce";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kGradNorm: return "grad_norm";
    case OpKind::kAllReduceGradNorm: return "all_reduce_grad_norm";
    case OpKind::kClipGradients: return "clip_gradients";
    case OpKind::kAllReduceLoss: return "all_reduce_loss";
    case OpKind::kOptimizerStep: return "optimizer_step";
    case OpKind::kCpuOptimizerStep: return "cpu_optimizer_step";
    case OpKind::kCopyGradsToHost: return "copy_grads_to_host";
    case OpKind::kCopyParamsToDevice: return "copy_params_to_device";
    case OpKind::kCopyParamsForGather: return "copy_params_for_gather";
    case OpKind::kCopyMasterToDevice: return "copy_master_to_device";
    case OpKind::kCopyMasterToHost: return "copy_master_to_host";
  }
  return "?";
}

nlohmann::json StepProgramJson(const StepProgram& program) {
  nlohmann::json ops = nlohmann::json::array();
  for (const StepOp& op : program.ops)
    ops.push_back({{"id", op.id},
                   {"name", op.name},
                   {"kind", OpKindName(op.kind)},
                   {"stream", StreamName(op.stream)},
                   {"group", CommGroupName(op.group)},
                   {"unit", op.unit},
                   {"micro_batch", op.micro_batch},
                   {"deps", op.deps}});
  return {{"ops", ops}, {"micro_batches", program.micro_batches}};
}

std::string CommGroupName(CommGroup g) {
  switch (g) {
    case CommGroup::kNone: return "none";
    case CommGroup::kShard: return "shard";
    case CommGroup::kReplica: return "replica";
    case CommGroup::kWorld: return "world";
  }
  return "?";
}

std::string MemoryCategoryName(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kGatheredParams: return "gathered_params";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kRecompute: return "recompute";
    case MemoryCategory::kWorkspace: return "workspace";
    case MemoryCategory::kLogits: return "logits";
    case MemoryCategory::kGradBuffers: return "grad_buffers";
    case MemoryCategory::kOffloadStaging: return "offload_staging";
  }
  return "?";
}

bool HostBlocks(const StepOp& op, bool cpu_device) {
  switch (op.stream) {
    case StreamKind::kCpu: return true;
    case StreamKind::kCompute:
      // Clipping reads the norm on the host (a device sync) for the factor AdamW applies.
      return cpu_device || op.kind == OpKind::kClipGradients;
    case StreamKind::kHostToDevice:
    case StreamKind::kDeviceToHost: return cpu_device;  // a CPU "copy" is a memcpy on the host
    case StreamKind::kGather:
    case StreamKind::kReduce: return false;  // collectives run on their own stream or thread
  }
  return false;
}

bool CopiesToDevice(OpKind k) {
  return k == OpKind::kCopyParamsToDevice || k == OpKind::kCopyParamsForGather || k == OpKind::kCopyMasterToDevice;
}

bool CopiesToHost(OpKind k) { return k == OpKind::kCopyGradsToHost || k == OpKind::kCopyMasterToHost; }

BlockActivationBytes BlockActivations(const Plan& plan, const HardwareProfile& profile) {
  const ActivationShape a = ShapeOfPlan(plan, profile.device_kind == "cpu");
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

}  // namespace llmplan
