#include "planner/replan_advice.h"

#include <string>

namespace llmplan {

std::string RePlanAdvice(const Plan& plan, bool gpu_memory) {
  std::string pins = "llmplan estimate --model " + plan.model.name + " --gpus " + std::to_string(plan.gpus) +
                     " --gpu " + plan.profile + " --seq " + std::to_string(plan.seq_len) + " --global-batch " +
                     std::to_string(plan.GlobalBatch()) + " --strategy " + StrategyName(plan.strategy);
  if (plan.strategy == ShardingStrategy::kHybridShard) pins += " --shard-group " + std::to_string(plan.shard_group_size);
  if (plan.OptimizerStateOnNvme()) pins += " --offload-to nvme";
  if (plan.cast_at_gather) pins += " --cast-at-gather yes";
  const bool all_checkpointed = static_cast<int64_t>(plan.checkpoint_layers.size()) == plan.model.layers;
  if (plan.cuda_graph && gpu_memory) {
    // The graph's private pool is memory nothing outside the graph reuses:
    // the step without it, the same in every other way, is the first to try.
    return "plan again without the CUDA graph: " + pins + " --micro-batch " + std::to_string(plan.micro_batch) +
           " --cuda-graph no --offload " + OffloadName(plan.offload);
  }
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

}  // namespace llmplan
