#include "planner/cost_model.h"

#include <algorithm>

#include "planner/nvme_offload.h"

namespace llmplan {

ComputeTerms CostModel::ComputeTermSeconds(const OpWork& w) const {
  const HardwareProfile& p = profile_;
  ComputeTerms t;
  if (w.gemm_flops > 0) t.gemm = w.gemm_flops / p.GemmFlopsPerSecond(w.gemm_min_dim, w.gemm_min_dim, w.gemm_min_dim);
  if (w.attention_flops > 0)
    t.attention = w.attention_flops / p.AttentionFlopsPerSecond(w.attention_backward, w.attention_head_dim, w.attention_seq);
  if (w.elementwise_bytes > 0)
    t.memory_bound = w.elementwise_bytes / (p.memory_bandwidth_bytes_per_s * p.elementwise_efficiency);
  t.kernel_overhead = w.launches * p.kernel_overhead_s;
  t.launch_floor = w.launches * p.kernel_launch_s;
  return t;
}

bool CostModel::PricedAsCompute(const StepOp& op) {
  switch (op.kind) {
    case OpKind::kForward:
    case OpKind::kRecompute:
    case OpKind::kBackward:
    case OpKind::kAccumulateShard:
    case OpKind::kLocalReduce:
    case OpKind::kGradNorm:
    case OpKind::kClipGradients:
    case OpKind::kOptimizerStep: return true;
    // One rank: the "gather" is a local cast of the master shard.
    case OpKind::kAllGather: return op.work.group_size <= 1;
    default: return false;
  }
}

double CostModel::Seconds(const StepOp& op) const {
  // In a CUDA graph the kernels are launched by the device from the graph,
  // not one by one by the host: no launch floor, and each kernel's fixed
  // cost is the graph's (HardwareProfile::graph_kernel_overhead_s).
  if (PricedAsCompute(op)) {
    if (!op.captured) return ComputeSeconds(op.work);
    ComputeTerms t = ComputeTermSeconds(op.work);
    t.kernel_overhead = op.work.launches * profile_.GraphKernelOverheadSeconds();
    return t.DeviceSeconds();
  }
  const OpWork& w = op.work;
  switch (op.kind) {
    case OpKind::kAllGather:
      // Plan::cast_at_gather: the cast of the fp32 master shard runs on the
      // gather's stream just ahead of the collective that sends it.
      return profile_.CollectiveSeconds(w.collective, w.collective_bytes, w.group_size, w.spans_nodes, w.spans_islands) +
             (w.elementwise_bytes > 0 ? ComputeSeconds(w) : 0.0);
    case OpKind::kReduceScatter:
    case OpKind::kAllReduce:
    case OpKind::kAllReduceGradNorm:
    case OpKind::kAllReduceLoss:
      return profile_.CollectiveSeconds(w.collective, w.collective_bytes, w.group_size, w.spans_nodes, w.spans_islands);
    case OpKind::kCopyParamsToDevice:
    case OpKind::kCopyParamsForGather:
    case OpKind::kCopyMasterToDevice: return w.copy_bytes / profile_.host_to_device_bytes_per_s;
    case OpKind::kCopyGradsToHost:
    case OpKind::kCopyMasterToHost: return w.copy_bytes / profile_.device_to_host_bytes_per_s;
    case OpKind::kCpuOptimizerStep: {
      // One process alone, or the host's rate split among those running at once.
      const double adam = w.host_sharers <= 1 ? w.cpu_adam_params / profile_.cpu_adam_alone_params_per_s
                                              : w.cpu_adam_params * w.host_sharers / profile_.cpu_adam_params_per_s;
      // A profile without disk rates cannot price the disk (the evaluation
      // refuses such plans; the executor only reads the program's structure).
      if (w.nvme_bytes <= 0 || !HasNvmeRates(profile_)) return adam;
      // NVMe: the disk streams block k+1 in and k-1 out while the cores
      // update block k, so the step takes the longer of the two, plus the
      // unit's first read and last write, which nothing overlaps.
      const double elements = w.nvme_bytes / 8;
      const double edge = NvmeEdgeSeconds(elements, w.host_sharers, profile_);
      return edge + std::max(adam, NvmeStreamSeconds(elements, w.host_sharers, profile_) - edge);
    }
    default: return 0;  // a release hands memory back; it takes no time
  }
}

double CostModel::IssueSeconds(const StepOp& op) const {
  // The captured ops are the program's first (MarkCapturedOps): the host
  // issues them as one graph launch, priced as one kernel's.
  if (op.captured) return op.id == 0 ? profile_.kernel_launch_s : 0;
  switch (op.stream) {
    case StreamKind::kCpu: return 0;
    case StreamKind::kCompute:
      if (op.kind == OpKind::kRelease) return 0;  // a pointer handed back to the allocator
      return std::max(1, op.work.launches) * profile_.kernel_launch_s;
    case StreamKind::kGather:
    case StreamKind::kReduce:
    case StreamKind::kHostToDevice:
    case StreamKind::kDeviceToHost: return profile_.kernel_launch_s;
  }
  return 0;
}

}  // namespace llmplan
