// MemoryModel: the device memory the executor allocates and frees, tensor by
// tensor and in the order it does — the one home of "how many bytes" for the
// step program, the simulator, the plan search and the executor's metrics.
//
// It mirrors the code that runs: executor/model/llama_model.cc (a block's
// RMSNorms, projections, RoPE, attention, SwiGLU, as LibTorch autograd saves
// their tensors; on a GPU the fused form's packed projections and kernels), loss/chunked_cross_entropy.cc (logits a chunk at a time, the
// gradient computed in the forward), step_interpreter.cc (units run one by
// one on detached inputs, gradients cast for the reduce-scatter) and
// flat_unit.cc (flat buffers gathered and released). C++ temporaries live to
// the end of their full expression, so a statement's peak counts all of them.
// Measured on H200 with the caching allocator's statistics after every op
// (tools/device/accuracy.sh), a block's saved bytes and in-op peaks match to
// the allocator's 512-byte rounding; tests/planner/memory_model_test.cc
// replays recorded runs against it.
//
// Sizes are per micro-batch of `tokens` tokens on one GPU. Two attention
// paths: a GPU's fused kernel (saves q, k, v, the output and the log-sum-exp;
// its output is laid out so that the transpose back is a view) and the CPU's
// plain attention of LibTorch 1.13 (materialised scores and probabilities).
#pragma once

#include <span>
#include <vector>

#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan {

// The tensors alive across ops, by id (MemoryDelta::tensor), so a later op
// can free what an earlier one allocated.
class TensorRegistry {
 public:
  void Reserve(size_t tensors) {
    tensors_.reserve(tensors);
    live_.reserve(tensors);
  }
  int Add(MemoryCategory category, double bytes);
  MemoryDelta Remove(int id);  // the free event of a live tensor

 private:
  std::vector<MemoryDelta> tensors_;  // by id (ids are handed out in order)
  std::vector<char> live_;
};

// The ordered memory events of one op (its MemoryDelta list).
class MemoryScript {
 public:
  // `expected_events`: room reserved up front (a block's forward records
  // 60-75 events; growing the list one doubling at a time was most of the
  // program builder's allocations).
  explicit MemoryScript(TensorRegistry& registry, size_t expected_events = 0) : registry_(registry) {
    events.reserve(expected_events);
  }
  int Alloc(MemoryCategory category, double bytes);  // returns the tensor's id; 0 bytes: no event, id -1
  void Free(int id);                                 // no-op for id -1
  void FreeAll(std::vector<int>& ids);               // in reverse order (as C++ destroys temporaries), then clears
  void FreeAll(std::span<const int> ids);            // in reverse order
  std::vector<MemoryDelta> events;
  // What saved activations are counted as (kRecompute in a recompute op).
  MemoryCategory saved_category = MemoryCategory::kActivations;

 private:
  TensorRegistry& registry_;
};

// One micro-batch's shapes, as the executor's tensors have them.
struct ActivationShape {
  double tokens = 0;        // micro_batch x seq_len
  double batch = 0, seq = 0;
  double hidden = 0, q = 0, kv = 0, inter = 0, heads = 0, kv_heads = 0, vocab = 0;
  double compute_bytes = 2;  // bf16 (2) or fp32 (4)
  double loss_chunk = 1024;  // tokens per chunk of the cross-entropy
  bool fused_attention = true;  // GPU: fused kernel; CPU: plain attention
  // GPU, shapes fitting base/block_kernel_shapes.h: RMSNorm, RoPE and SwiGLU
  // are the executor's fused kernels; otherwise LibTorch's composite ops.
  bool fused_kernels = true;
  // Attention kept inside documents (Plan::attention): each micro-batch's
  // layout (executor/model/attention_layout.h) lives from its embedding's
  // forward to its backward. document_mask: attention runs under the
  // layout's [B, 1, T, T] mask (the CPU; fp32, heads flash cannot take), not
  // as the flash varlen kernel. attention_work: the attention FLOPs' share
  // of a whole window's (Plan::document_attention_work; 1 under the mask,
  // which computes every tile).
  bool documents = false;
  bool document_mask = false;
  double attention_work = 1;
  // The share of targets the head computes the loss of (Plan::trained_fraction).
  double trained_fraction = 1;
};
// fused_kernels: Plan::fused_kernels (the kernels run only on a GPU).
ActivationShape ShapeOf(const ModelSpec& model, int64_t micro_batch, int64_t seq_len, int compute_bytes,
                        int64_t loss_chunk_tokens, bool cpu_device, bool fused_kernels);
// The shape of one of `plan`'s micro-batches: ShapeOf with its fields, and
// its attention.
ActivationShape ShapeOfPlan(const Plan& plan, bool cpu_device);

// What one unit's forward leaves for its backward.
struct SavedTensors {
  std::vector<int> saved;  // kept by autograd (freed by the backward)
  int output = -1;         // the unit's output (the next unit's input), freed by this unit's backward
};

// Forward of the embedding: its output (the first block's input).
SavedTensors EmbeddingForward(const ActivationShape& a, MemoryScript& s);
// Forward of a block on an input that stays alive. `keep_graph` false: under
// NoGradGuard (a checkpointed block keeps only its output).
SavedTensors BlockForward(const ActivationShape& a, bool keep_graph, MemoryScript& s);
// Recompute of a checkpointed block: the forward again with its graph; the
// new output replaces `previous.output`.
SavedTensors BlockRecompute(const ActivationShape& a, const SavedTensors& previous, MemoryScript& s);
// Forward of the head: final norm and the chunked cross-entropy, which
// computes the gradients of its input and of the output matrix (`matrix_params`
// elements: vocab x hidden, the embedding's when tied) right away.
SavedTensors HeadForward(const ActivationShape& a, double matrix_params, MemoryScript& s);
// Forward of the head in an evaluation (forward only, under NoGradGuard): the
// final norm and the chunked cross-entropy's loss, no gradient. Its output is
// the micro-batch's loss; nothing is saved.
SavedTensors HeadEvaluate(const ActivationShape& a, MemoryScript& s);

// Backward of a unit: `flowing` is the id of the gradient arriving from the
// unit above (-1 for the head), replaced by the one it sends below (-1 for
// the embedding; returned). `peak_transient` is the autograd temporaries'
// highest point. The caller adds the gradient buffers around it.
int BlockBackward(const ActivationShape& a, const SavedTensors& forward, int flowing, MemoryScript& s);
int HeadBackward(const ActivationShape& a, const SavedTensors& forward, MemoryScript& s);
void EmbeddingBackward(const ActivationShape& a, const SavedTensors& forward, int flowing, double table_params,
                       MemoryScript& s);

// Host memory of asynchronous checkpoints (`llmplan run --ckpt-async`,
// executor/checkpoint/sharded_checkpoint.h): each rank of the first shard
// group copies its slice of every unit — fp32 master, AdamW m and v, 12
// bytes per element — into host buffers it allocates at the first save and
// keeps for the run (pinned on a GPU machine). The other groups' ranks hold
// copies of the same values and stage nothing.
//
// The most one rank stages: rank 0, whose slice of every unit is whole
// (padded_params / group_size elements; later ranks may own less of a unit
// the padding reaches into, and nothing of an edge unit kept whole, which
// rank 0 alone saves).
double CheckpointStagingBytesPerRank(const StepProgram& program);

// The same as a share of one GPU's host memory, as the plan's host figure
// counts it (simulator/evaluate.h: the node's host memory split between the
// job's GPUs on it): ranks 0..G-1 fill the first node, so it holds
// min(G, GPUs on a node) staging copies, shared by its GPUs. Other nodes
// hold fewer. REQUIRES: plan is valid and `program` was built for it.
double CheckpointStagingBytesPerGpu(const Plan& plan, const StepProgram& program);

}  // namespace llmplan
