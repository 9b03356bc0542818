// StepProgram: the operations of one optimizer step on one GPU, in the order
// the host issues them, each on a stream, with explicit dependencies and the
// device memory each allocates and frees. Built by one function from (plan,
// profile); interpreted twice: by the simulator (durations from the cost
// model, virtual streams) and by the executor (real CUDA streams and NCCL, or
// Gloo on CPU). Both perform exactly these operations and no others, so every
// measured operation has a predicted twin with the same `id` and `name`.
//
// The ordering rule, implemented by both interpreters:
//   1. The host issues the ops in list order.
//   2. Each stream runs its ops in list order, one at a time.
//   3. An op starts once the host has issued it, its stream is free and every
//      op in `deps` has finished.
//   4. Host work blocks the host: an op that HostBlocks() (CPU-stream work, an
//      op that reads a device value on the host, and on a CPU device every
//      compute op) holds the host until it ends, so nothing after it in the
//      list is issued before then. Issuing takes the host
//      CostModel::IssueSeconds per op (kernel launches).
//   5. A collective or copy waits for the compute work issued before it (its
//      stream waits on an event recorded on the compute stream when it is
//      issued): the builder writes that as a dep, so rule 3 covers it.
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
  kCompute,       // forward, backward, recompute, loss, gradient sums, GPU optimizer
  kGather,        // all-gathers of parameters (prefetched ahead of compute)
  kReduce,        // reduce-scatters / all-reduces of gradients, the norm and the loss
  kHostToDevice,  // pinned host -> device copies (offload)
  kDeviceToHost,  // device -> pinned host copies (offload)
  kCpu,           // CPU optimizer (offload)
};
constexpr int kNumStreams = 6;
std::string StreamName(StreamKind s);

enum class OpKind {
  kAllGather,      // gather unit's bf16 params from the shard group (one GPU: cast the fp32 master)
  kForward,        // forward of a unit (embedding, block, head+loss); a block that has a
                   // recompute op for this micro-batch keeps only its input
  kRecompute,      // re-run a checkpointed block's forward before its backward
  kBackward,       // backward of a unit into its unsharded compute-dtype gradient
  kRelease,        // free gathered params (zero duration; memory event)
  kReduceScatter,  // gradients to their owners within the shard group, into a temporary shard
  kAccumulateShard,  // grad shard += reduced shard / shard group size (x gradient_scale); frees the temporaries
                     // (the step's first micro-batch writes the shard: =, not +=)
  kLocalReduce,    // unsharded unit: fp32 grad += compute-dtype grad (x gradient_scale); frees the latter
                   // (the step's first micro-batch writes it: =, not +=)
  kAllReduce,      // a unit's fp32 gradient shard summed across the replica group (no_shard, hybrid)
  kGradNorm,       // sum of squares of this rank's gradient shards (a device scalar)
  kAllReduceGradNorm,  // that scalar summed over the shard group
  kClipGradients,  // the host reads the norm and keeps the factor (< 1 when it exceeds the
                   // limit) that AdamW applies as it reads each gradient, on the GPU or the CPU
  kAllReduceLoss,  // the step's summed loss over every rank (the reported mean)
  kOptimizerStep,  // AdamW on this rank's fp32 shard of a unit (GPU)
  kCpuOptimizerStep,  // AdamW on the host (offload): the previous step's gradients,
                      // unit by unit beside this step's first forward
  // Copies between pinned host memory and the device (offload), one kind per
  // thing copied, so the executor need not guess what a copy moves:
  kCopyGradsToHost,      // offload optimizer: the unit's final fp32 gradient shard into its host staging
  kCopyParamsToDevice,   // offload optimizer: the compute-dtype shard the CPU AdamW wrote, into the
                         // device's compute shard (nothing is copied when no update was applied)
  kCopyParamsForGather,  // parameters kept on the host: the compute-dtype shard into a device buffer
                         // just ahead of the all-gather that sends it (and frees it)
  kCopyMasterToDevice,   // offload params: the fp32 master shard up for the GPU AdamW
  kCopyMasterToHost,     // offload params: the updated fp32 master shard back down (frees the device copy)
};
constexpr int kNumOpKinds = 20;
std::string OpKindName(OpKind k);
// The direction of a copy kind: host -> device (its stream kHostToDevice) or
// device -> host (kDeviceToHost). Neither for every other kind.
bool CopiesToDevice(OpKind k);
bool CopiesToHost(OpKind k);

// The process group a collective runs in (see executor/comm/process_groups.h).
enum class CommGroup {
  kNone,     // not a collective
  kShard,    // the plan.shard_group_size ranks sharing one copy of the state
  kReplica,  // the plan.ReplicaGroups() ranks holding the same shard
  kWorld,    // every rank
};
std::string CommGroupName(CommGroup g);

// Where the bytes of a memory event belong, for the memory breakdown.
enum class MemoryCategory {
  kGatheredParams,  // unsharded bf16 parameters of units in flight
  kActivations,     // saved activations of units awaiting backward
  kRecompute,       // activations rebuilt by recompute, during one backward
  kWorkspace,       // transient buffers of one forward/backward (attention, MLP intermediates)
  kLogits,          // chunked logits and their gradient
  kGradBuffers,     // unsharded gradients waiting for their reduction (or AdamW: gradient_path.h)
  kOffloadStaging,  // device buffers that stage host<->device copies
};
constexpr int kNumMemoryCategories = 7;
std::string MemoryCategoryName(MemoryCategory c);

struct MemoryDelta {
  MemoryCategory category;
  double bytes;     // > 0 allocates, < 0 frees
  int tensor = -1;  // the allocation, unique in the program: a free names the one it frees
};

// What an operation does, in units the cost model prices.
struct OpWork {
  double gemm_flops = 0;
  double gemm_min_dim = 0;       // smallest GEMM dimension (efficiency curve)
  double attention_flops = 0;    // causal-halved FLOPs
  bool attention_backward = false;
  int attention_head_dim = 0;    // the heads' width (HardwareProfile::AttentionFlopsPerSecond); 0: the reference
  double attention_seq = 0;      // the keys each query's causal loop spans, as the rate sees them; 0: the reference
  double elementwise_bytes = 0;  // bytes read+written by memory-bound kernels
  int launches = 0;              // kernel launches (host overhead floor)
  // Collectives
  CollectiveOp collective = CollectiveOp::kAllGather;
  double collective_bytes = 0;  // full (unsharded) buffer bytes
  int group_size = 1;
  bool spans_nodes = false;
  bool spans_islands = false;  // within a node, the group crosses from one GPU island to another
  // Host <-> device copies and CPU work
  double copy_bytes = 0;
  double cpu_adam_params = 0;
  // Processes sharing the host's cores for that CPU work: the job's GPUs on
  // one node, each running its own AdamW at the same time (2 x H200 ranks
  // measured 2.37 G params/s each against 4.48 alone).
  int host_sharers = 1;
  // NVMe offload (kCpuOptimizerStep): the unit's AdamW m and v read from the
  // local SSD and written back, bytes each way (8 per parameter); the
  // host_sharers ranks of the node split the disk as they split the cores.
  double nvme_bytes = 0;
};

struct StepOp {
  int id = 0;
  OpKind kind = OpKind::kForward;
  StreamKind stream = StreamKind::kCompute;
  CommGroup group = CommGroup::kNone;  // collectives: the group it runs in
  int unit = -1;         // -1: not about one unit
  int micro_batch = -1;  // -1: once per step
  std::string name;      // e.g. "forward block 3 mb 0", unique within the program
  std::vector<int> deps;  // ids of earlier ops that must finish before this one starts
  // kAccumulateShard / kLocalReduce: the fp32 gradient is multiplied by this
  // after the add (1/R before a replica all-reduce, so the sum is the mean).
  double gradient_scale = 1.0;
  OpWork work;
  // The op's memory events in the order the executor makes them (a temporary
  // is + then -), as the caching allocator sees them when the op is issued
  // (planner/memory_model.h); the simulator applies them when the op starts.
  std::vector<MemoryDelta> alloc_at_start;
  std::vector<MemoryDelta> free_at_end;  // freed when the op ends (the simulator's timeline only)
  // Part of the step's CUDA graph (StepProgram::cuda_graph): issued once,
  // while the graph is captured, and replayed with it every step after.
  bool captured = false;
};

// Rule 4 above: does `op` hold the host until it ends? `cpu_device`: the
// compute stream is the host itself (LibTorch's CPU kernels run synchronously).
bool HostBlocks(const StepOp& op, bool cpu_device);

// A unit is what is gathered, computed and released as one: the embedding,
// each transformer block, and the head (final norm + lm_head + loss).
enum class UnitKind { kEmbedding, kBlock, kHead };
struct Unit {
  UnitKind kind;
  int layer = -1;      // block index for kBlock
  int64_t params = 0;  // parameters this unit owns (its flat buffer's length)
  int64_t padded_params = 0;  // rounded up to a multiple of group_size
  // GPUs sharing one copy of its state (Plan::UnitShardGroup): the plan's
  // shard group, or 1 for an edge unit kept whole (replicate_edges).
  int group_size = 1;
  // Kept gathered for the whole run: no gathers or releases (no_shard, or an
  // edge unit kept whole); its compute copy is refreshed by the optimizer.
  bool resident = false;
};

// Device memory that lives for the whole step (not in the op stream).
struct PersistentMemory {
  double param_shards = 0;      // fp32 master shard (0 when params offloaded)
  double grad_shards = 0;       // fp32 gradient shard accumulated across micro-batches (0: gradient_path.h)
  double optimizer_state = 0;   // AdamW m and v, fp32 (0 when offloaded)
  double compute_params = 0;    // bf16 copies kept resident (no_shard; tied embedding)
  double cuda_context = 0;      // outside the caching allocator
  double workspaces = 0;        // cuBLAS / cuDNN, in the caching allocator (the profile's)
  // The same again for the stream a CUDA graph is captured on
  // (StepProgram::cuda_graph): cuBLAS keeps a workspace per stream, and the
  // capture's is taken in the graph's pool.
  double graph_workspaces = 0;
  double step_inputs = 0;       // the step's token batches and the RoPE table on the device
  double collective_buffers = 0;  // NCCL buffers, per communicator
};

// Offloaded optimizer with Plan::offload_staging slots (and the delayed
// update): the pinned slots the fp32 gradient shards come down through for
// the CPU AdamW, and (offload optimizer) the updated compute-dtype shards go
// up through. Each slot is sized for the largest unit and serves units u,
// u + kOffloadStagingSlots, ... in turn: two let unit u + 1's gradient come
// down while the host updates unit u, and unit u - 1's shard go up
// meanwhile. A staging buffer per unit (offload_staging unit) costs 6 bytes
// per parameter of pinned memory (48 GB for Llama-3-8B, which kept its
// optimizer offload off a 128 GiB host) but brings each gradient down under
// the backward, when the host is idle, instead of beside the host update,
// whose memory bandwidth the copy shares (10.6% of a Llama-3.2-3B step on one
// H200).
constexpr int kOffloadStagingSlots = 2;

struct HostMemory {
  double master_params = 0;  // pinned fp32 master weights (offload params)
  double optimizer_state = 0;  // pinned AdamW state (offload optimizer)
  // Pinned fp32 gradient shards the CPU step reads, and compute-dtype shards
  // it writes for the copy up: one per unit, or kOffloadStagingSlots of the
  // largest (Plan::offload_staging).
  double grad_staging = 0;
  double param_staging = 0;
  // Asynchronous checkpoints' host copy of the state, this GPU's share
  // (CheckpointStagingBytesPerGpu). Not a property of the plan but of how it
  // runs (llmplan run --ckpt-async): BuildStepProgram leaves it 0; the
  // evaluation adds it when asked (simulator/evaluate.h).
  double checkpoint_staging = 0;
  // NVMe offload: the pinned blocks AdamW's state streams through
  // (planner/nvme_offload.h); optimizer_state is then 0.
  double nvme_staging = 0;
  double Total() const {
    return master_params + optimizer_state + grad_staging + param_staging + checkpoint_staging + nvme_staging;
  }
  // Not host memory: the bytes of AdamW state this GPU's rank keeps in its
  // file on the local SSD (offload_to nvme), which the disk must have free.
  double nvme_state = 0;
};

// Where an offloaded optimizer's state and its staging live: what the
// executor allocates on the host before the first step.
struct OffloadLayout {
  bool optimizer_on_host = false;  // AdamW runs on the host (kCpuOptimizerStep), its state pinned there
  bool master_on_host = false;     // the fp32 master shards live in pinned host memory
  // Both: the compute-dtype shards live on the host too, copied up ahead of
  // each gather (kCopyParamsForGather).
  bool ComputeShardOnHost() const { return optimizer_on_host && master_on_host; }
  // optimizer_on_host: the pinned buffers the gradients come down through and
  // the updated shards go up through. staged_per_unit: one per unit, each its
  // unit's shard; otherwise min(kOffloadStagingSlots, units) slots the size
  // of the largest shard, unit u taking slot u % staging_buffers.
  bool staged_per_unit = false;
  int staging_buffers = 0;
};

struct StepProgram {
  std::vector<Unit> units;  // in forward order: embedding, blocks 0..L-1, head
  std::vector<StepOp> ops;  // a valid issue order: deps always point backwards
  PersistentMemory persistent;
  HostMemory host;
  int micro_batches = 0;
  // An evaluation's program (BuildEvaluationProgram): forward only, no
  // gradient, no update; its loss is the mean over its micro-batches.
  bool evaluation = false;

  // What the ops work on. The executor runs the program from these and the
  // ops alone; it never reads the Plan the program was built from.
  int64_t micro_batch = 0;        // sequences per micro-batch on each rank
  int64_t seq_len = 0;            // tokens per sequence
  int64_t loss_chunk_tokens = 0;  // rows of logits the loss materialises at once
  // Attention kept inside each document of a window (Plan::attention): each
  // micro-batch's embedding forward makes its attention layout from the
  // tokens' kDocumentStart bits (executor/data/micro_batch.h) and its
  // embedding backward (an evaluation's head) frees it.
  bool document_attention = false;
  DType compute_dtype = DType::kBF16;  // parameters as gathered, activations, unsharded gradients
  DType reduce_dtype = DType::kFP32;   // what the reduce-scatters send
  // Plan::cuda_graph on a GPU: the ops marked `captured` — the step's longest
  // prefix of compute-stream ops that no host read interrupts (every
  // forward, backward and gradient sum, and the norm; the clip reads it on
  // the host) — are captured once as a CUDA graph and replayed every later
  // step as one launch, their tensors in the graph's private memory pool.
  // The step before the capture runs them one by one (it warms cuBLAS and
  // cuDNN up); the rest of the step always does.
  bool cuda_graph = false;
  int gpus = 1;              // ranks running the program
  int shard_group_size = 1;  // ranks sharing one copy of the blocks' state (a unit's own: Unit::group_size)
  int replica_groups = 1;    // ranks holding the same shard (gpus / shard_group_size)
  OffloadLayout offload;

  int BlockUnit(int layer) const { return layer + 1; }
  int HeadUnit() const { return static_cast<int>(units.size()) - 1; }
};

// Builds the program of one optimizer step for `plan` (which names its model).
// `profile` supplies topology (does a group span nodes?), memory constants
// and the device kind. The ops come in issue order: each all-gather as early
// as its deps allow, so it overlaps the compute before it.
// `op_names` false leaves every StepOp::name empty: for the plan search,
// which prices ~3,000 ops a plan and shows none of them (naming them was 7%
// of its time). The ops are the same either way.
// REQUIRES: plan.Validate() passes.
StepProgram BuildStepProgram(const Plan& plan, const HardwareProfile& profile, bool op_names = true);

// Builds the program of an evaluation (llmplan run --eval-data):
// `micro_batches` micro-batches of the plan's shape, forward only and without
// a gradient — each unit gathered, run and released, the activation it read
// freed once read (nothing waits for a backward) — then the loss summed over
// every rank. It reads the training state and writes none: no backward,
// reduction, clipping or update. Priced and timed like the step's program
// (the simulator interprets it; StepInterpreter::Evaluate runs it), it is
// not counted by StepProgramsBuilt.
// REQUIRES: plan.Validate() passes; micro_batches >= 1.
StepProgram BuildEvaluationProgram(const Plan& plan, const HardwareProfile& profile, int micro_batches);

// How many programs BuildStepProgram has built in this process: `llmplan
// run` builds exactly one, and a test holds it to that.
int64_t StepProgramsBuilt();

// Activation bytes of one block per micro-batch (from planner/memory_model.h),
// for ranking blocks to checkpoint: what it keeps from forward to backward,
// with and without checkpointing (a checkpointed block keeps only its
// output), and the highest its backward's temporaries reach.
struct BlockActivationBytes {
  double full = 0;
  double checkpointed = 0;
  double working = 0;
  double head = 0;  // the head's forward at its highest (what the last block's backward adds to)
};
BlockActivationBytes BlockActivations(const Plan& plan, const HardwareProfile& profile);

// program.json, written by `llmplan run` beside op_times.jsonl and read back
// by feedback/measured_run.h: {"ops": [{id, name, kind, stream, group, unit,
// micro_batch, deps}...], "micro_batches": N}.
nlohmann::json StepProgramJson(const StepProgram& program);

}  // namespace llmplan
