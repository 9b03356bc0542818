// StepProgram: the operations of one optimizer step on one GPU, in the order
// they are issued, each on a stream, with explicit dependencies and the device
// memory each allocates and frees. Built by one function from (plan, model);
// interpreted twice: by the simulator (durations from the cost model, virtual
// streams) and by the executor (real CUDA streams and NCCL, or Gloo on CPU).
// Because both run the same program, every measured operation has a predicted
// twin with the same `id` and `name`.
//
// Ranks are symmetric (every GPU runs the same program on its own shard), so
// one program describes all of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/hardware_profile.h"
#include "planner/plan.h"

namespace llmplan {

// Streams that run concurrently. One operation at a time per stream, in
// program order; operations on different streams overlap unless a dependency
// orders them.
enum class StreamKind {
  kCompute,       // forward, backward, recompute, loss, GPU optimizer
  kGather,        // all-gathers of parameters (prefetched ahead of compute)
  kReduce,        // reduce-scatters / all-reduces of gradients
  kHostToDevice,  // pinned host -> device copies (offload)
  kDeviceToHost,  // device -> pinned host copies (offload)
  kCpu,           // CPU optimizer (offload)
};
constexpr int kNumStreams = 6;
std::string StreamName(StreamKind s);

enum class OpKind {
  kAllGather,      // gather unit's bf16 params from the shard group
  kForward,        // forward of a unit (embedding, block, head+loss)
  kRecompute,      // re-run a checkpointed block's forward before its backward
  kBackward,       // backward of a unit
  kRelease,        // free gathered params / activations (zero duration; memory event)
  kReduceScatter,  // gradients to their owners within the shard group
  kAllReduce,      // gradients across replica groups (no_shard, hybrid) or the grad norm
  kCopyToDevice,   // offload: params / gradients host -> device
  kCopyToHost,     // offload: gradients device -> host
  kOptimizerStep,  // AdamW on this rank's fp32 shard of a unit (GPU)
  kCpuOptimizerStep,  // AdamW on the host (offload)
};
std::string OpKindName(OpKind k);

// Where the bytes of a memory event belong, for the memory breakdown.
enum class MemoryCategory {
  kGatheredParams,  // unsharded bf16 parameters of units in flight
  kActivations,     // saved activations of units awaiting backward
  kRecompute,       // activations rebuilt by recompute, during one backward
  kWorkspace,       // transient buffers of one forward/backward (attention, MLP intermediates)
  kLogits,          // chunked logits and their gradient
  kGradBuffers,     // unsharded gradients waiting for their reduce-scatter
  kOffloadStaging,  // device buffers that stage host<->device copies
};
constexpr int kNumMemoryCategories = 7;
std::string MemoryCategoryName(MemoryCategory c);

struct MemoryDelta {
  MemoryCategory category;
  double bytes;  // > 0 allocates, < 0 frees
};

// What an operation does, in units the cost model prices.
struct OpWork {
  double gemm_flops = 0;
  double gemm_min_dim = 0;       // smallest GEMM dimension (efficiency curve)
  double attention_flops = 0;    // causal-halved FLOPs
  bool attention_backward = false;
  double elementwise_bytes = 0;  // bytes read+written by memory-bound kernels
  int launches = 0;              // kernel launches (host overhead floor)
  // Collectives
  CollectiveOp collective = CollectiveOp::kAllGather;
  double collective_bytes = 0;  // full (unsharded) buffer bytes
  int group_size = 1;
  bool spans_nodes = false;
  // Host <-> device copies and CPU work
  double copy_bytes = 0;
  double cpu_adam_params = 0;
};

struct StepOp {
  int id = 0;
  OpKind kind = OpKind::kForward;
  StreamKind stream = StreamKind::kCompute;
  int unit = -1;         // -1: not about one unit
  int micro_batch = -1;  // -1: once per step
  std::string name;      // e.g. "fwd block 3 mb 0", unique within the program
  std::vector<int> deps;  // ids of earlier ops that must finish before this one starts
  OpWork work;
  std::vector<MemoryDelta> alloc_at_start;  // allocated when the op starts
  std::vector<MemoryDelta> free_at_end;     // freed when it ends (negative bytes)
};

// A unit is what is gathered, computed and released as one: the embedding,
// each transformer block, and the head (final norm + lm_head + loss).
enum class UnitKind { kEmbedding, kBlock, kHead };
struct Unit {
  UnitKind kind;
  int layer = -1;      // block index for kBlock
  int64_t params = 0;  // parameters this unit owns (its flat buffer's length)
  int64_t padded_params = 0;  // rounded up to a multiple of the shard group size
};

// Device memory that lives for the whole step (not in the op stream).
struct PersistentMemory {
  double param_shards = 0;      // fp32 master shard (0 when params offloaded)
  double grad_shards = 0;       // fp32 gradient shard accumulated across micro-batches
  double optimizer_state = 0;   // AdamW m and v, fp32 (0 when offloaded)
  double compute_params = 0;    // bf16 copies kept resident (no_shard; tied embedding)
  double cuda_context = 0;      // outside the caching allocator
  double workspaces = 0;        // cuBLAS / cuDNN
  double collective_buffers = 0;  // NCCL buffers, per communicator
};

struct HostMemory {
  double master_params = 0;  // pinned fp32 master weights (offload params)
  double optimizer_state = 0;  // pinned AdamW state (offload optimizer)
  double grad_staging = 0;   // pinned fp32 gradient shards copied down for the CPU step
  double param_staging = 0;  // pinned compute-dtype copy of the updated shard, copied up after the CPU step
  double Total() const { return master_params + optimizer_state + grad_staging + param_staging; }
};

struct StepProgram {
  std::vector<Unit> units;  // in forward order: embedding, blocks 0..L-1, head
  std::vector<StepOp> ops;  // a valid issue order: deps always point backwards
  PersistentMemory persistent;
  HostMemory host;
  int64_t tokens_per_micro_batch = 0;  // on this GPU
  int micro_batches = 0;

  int BlockUnit(int layer) const { return layer + 1; }
  int HeadUnit() const { return static_cast<int>(units.size()) - 1; }
};

// Builds the program of one optimizer step for `plan` (which names its model).
// `profile` supplies topology (does a group span nodes?) and memory constants.
// REQUIRES: plan.Validate() passes.
StepProgram BuildStepProgram(const Plan& plan, const HardwareProfile& profile);

// Saved-activation bytes of one block per micro-batch, kept until backward,
// with and without checkpointing (a checkpointed block keeps only its input).
struct BlockActivationBytes {
  double full = 0;
  double checkpointed = 0;
  double working = 0;  // transient peak inside one block's forward or backward
};
BlockActivationBytes BlockActivations(const ModelSpec& model, int64_t micro_batch, int64_t seq_len);

}  // namespace llmplan
