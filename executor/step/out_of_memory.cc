// Out of memory in a step (see out_of_memory.h).
#include "executor/step/out_of_memory.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>

#include "base/format.h"
#include "planner/memory_timeline.h"

namespace llmplan::executor {

std::string RePlanAdvice(const Plan& plan, bool gpu_memory) {
  std::string pins = "llmplan estimate --model " + plan.model.name + " --gpus " + std::to_string(plan.gpus) +
                     " --gpu " + plan.profile + " --seq " + std::to_string(plan.seq_len) + " --global-batch " +
                     std::to_string(plan.GlobalBatch()) + " --strategy " + StrategyName(plan.strategy);
  if (plan.strategy == ShardingStrategy::kHybridShard) pins += " --shard-group " + std::to_string(plan.shard_group_size);
  if (plan.OptimizerStateOnNvme()) pins += " --offload-to nvme";
  if (plan.cast_at_gather) pins += " --cast-at-gather yes";
  const bool all_checkpointed = static_cast<int64_t>(plan.checkpoint_layers.size()) == plan.model.layers;
  if (plan.replicate_edges) {
    // The embedding's and head's whole state on every GPU is the cheapest
    // memory to give back: it costs only communication.
    return "plan again with the embedding and head sharded like the blocks: " + pins + " --micro-batch " +
           std::to_string(plan.micro_batch) + " --replicate-edges no --offload " + OffloadName(plan.offload);
  }
  if (gpu_memory && plan.offload == Offload::kNone && plan.shard_group_size > 1 &&
      plan.strategy != ShardingStrategy::kNoShard && !plan.cast_at_gather) {
    // The bf16 copy of every shard kept for the gathers: 2 bytes a parameter
    // of the shard back for a cast per gather beside the compute (on a GPU's
    // side stream; a CPU run would pay for it in line).
    return "plan again casting each gather's shard from the fp32 master instead of keeping a bf16 copy: " + pins +
           " --micro-batch " + std::to_string(plan.micro_batch) + " --cast-at-gather yes --offload none";
  }
  if (plan.micro_batch > 1) {
    return "plan again with the same pins and a smaller micro-batch: " + pins + " --micro-batch " +
           std::to_string(plan.micro_batch / 2) + " --offload " + OffloadName(plan.offload);
  }
  if (!all_checkpointed) {
    return "plan again with the same pins and every block checkpointed: " + pins +
           " --micro-batch 1 --checkpoint-layers all --offload " + OffloadName(plan.offload);
  }
  if (!OffloadsOptimizer(plan.offload)) {
    return "plan again with the optimizer offloaded: " + pins + " --micro-batch 1 --checkpoint-layers all --offload optimizer";
  }
  return "the smallest micro-batch with every block checkpointed and the optimizer offloaded does not fit: plan for "
         "more GPUs (llmplan estimate --gpus auto)";
}

UserError OutOfMemoryError(const Plan& plan, const StepProgram& program, const StepOp& op, int rank,
                           const at::Device& device, const MemoryAtFailure& memory) {
  const MemoryTimeline predicted = ReplayMemory(program);
  const double at_op = op.id < static_cast<int>(predicted.after_op.size()) ? predicted.after_op[op.id] : 0;
  return UserError("rank " + std::to_string(rank) + ": out of memory on " + device.str() + " in op " +
                   std::to_string(op.id) + " \"" + op.name + "\": " + FormatBytes(static_cast<double>(memory.allocated)) +
                   " allocated, " + FormatBytes(static_cast<double>(memory.reserved)) +
                   " reserved when it failed; the plan predicts a peak of " + FormatBytes(predicted.peak) +
                   " allocated (" + FormatBytes(at_op) + " after this op); " + RePlanAdvice(plan, device.is_cuda()));
}

void MaybeInjectOutOfMemory(int rank, int op_id, const at::Device& device) {
  static const std::pair<int, int> target = [] {
    const char* text = std::getenv("LLMPLAN_TEST_OOM_AT");
    int r = -1, o = -1;
    if (text == nullptr || std::sscanf(text, "%d:%d", &r, &o) != 2) return std::pair<int, int>{-1, -1};
    return std::pair<int, int>{r, o};
  }();
  if (target.first != rank || target.second != op_id) return;
  // 1 PiB: more than any machine has, so the allocator itself refuses it.
  at::Tensor impossible = at::empty({int64_t{1} << 50}, at::TensorOptions().dtype(at::kByte).device(device));
}

}  // namespace llmplan::executor
