// StepInterpreter: runs one optimizer step by interpreting a StepProgram —
// the program the simulator prices — performing exactly its operations, in
// its order (step_program.h's ordering rule), and measuring each where it
// runs (step_recorder.h). The program is its whole contract: the batch shape,
// dtypes, groups and offload layout are the program's, and which blocks keep
// only their input, every reduction, the norm, the clipping, the loss and
// each host copy are its ops. No Plan is read here. How each op kind runs is
// written above its handler in step_interpreter.cc; docs/ARCHITECTURE.md has
// the whole picture.
//
// A collective is issued and not waited for; an op that depends on one makes
// its stream wait for it (an event: the host does not block), which also
// covers every collective issued before it on that communicator's stream.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "executor/sharding/flat_unit.h"
#include "executor/model/llama_model.h"
#include "executor/optimizer/adamw.h"
#include "executor/step/step_recorder.h"
#include "planner/step_program.h"

namespace llmplan::executor {

class Communicator;
class CollectiveWork;
class CollectiveWatchdog;
class StepGraph;

// The communicators a step uses. All null: one process (no collectives).
struct StepComms {
  Communicator* shard = nullptr;         // program.shard_group_size ranks: all-gathers
  Communicator* shard_reduce = nullptr;  // the same ranks: reduce-scatters, the norm's all-reduce
  Communicator* replica = nullptr;       // program.replica_groups ranks
  Communicator* world = nullptr;         // every rank: the step's loss
  CollectiveWatchdog* watchdog = nullptr;  // optional: watches every collective issued
};

struct StepResult {
  double loss = 0;       // mean over the step's micro-batches (and ranks)
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;         // learning rate applied
  bool update_skipped = false;  // the update gate refused this step's gradients (see SetUpdateGate)
  StepMeasurement measurement;  // every op, by id
  std::vector<int> executed;    // op ids in the order they were performed
  // Device seconds by kind of work (sums of the ops' measured durations).
  double forward_s = 0;    // forward (incl. the head's loss)
  double recompute_s = 0;  // checkpointed blocks' recompute
  double backward_s = 0;   // backward and the gradient sums after it
  double optimizer_s = 0;  // norm, clipping, AdamW
  double comm_s = 0;       // collectives and copies
};

// What an evaluation measured (StepInterpreter::Evaluate).
struct EvaluationResult {
  double loss = 0;              // mean over the evaluation's micro-batches (and ranks)
  StepMeasurement measurement;  // every op of the evaluation's program, by id
};

class StepInterpreter {
 public:
  // Checks that the program can run with these units and communicators.
  // REQUIRES: units were made for `model` on `device` with the program's
  // shard groups and offload layout (MakeShardedUnits); the program was
  // built for the model; optimizer state on the host iff
  // program.offload.optimizer_on_host. Throws UserError for a program this
  // executor cannot run (several GPUs without communicators of the
  // program's group sizes).
  StepInterpreter(StepProgram program, const LlamaModel& model, std::vector<FlatUnit>& units, AdamW& optimizer,
                  const at::Device& device, StepComms comms = {});
  ~StepInterpreter();
  StepInterpreter(const StepInterpreter&) = delete;
  StepInterpreter& operator=(const StepInterpreter&) = delete;

  const StepProgram& program() const { return program_; }

  // Runs one optimizer step on program.micro_batches micro-batches (this
  // rank's), each an int64 [micro_batch, seq_len + 1] token tensor on any device
  // (inputs are the first seq_len columns, targets the last seq_len; a loss
  // mask's untrained targets carry kUntrainedTarget, executor/data/micro_batch.h,
  // read on a CPU batch: the loss is then the mean over the step's trained
  // targets).
  // Gradients are zeroed at the start, so after Run the units' grad() hold
  // this step's gradients, clipped (with the optimizer offloaded: not
  // clipped; the host update applies the factor). Returns after the device
  // finished. With the optimizer offloaded the step's update is left
  // pending for the next Run: see FinishUpdate.
  // REQUIRES: micro_batches.size() == program.micro_batches. Throws UserError for a
  // wrong shape or a token id outside [0, vocab) (checked on the host before
  // any kernel when the batch is on the CPU), and when an op runs out of
  // memory (out_of_memory.h: the op, measured and predicted memory, a plan
  // that would fit: SetOutOfMemoryAdvice).
  StepResult Run(const std::vector<at::Tensor>& micro_batches);

  // Runs an evaluation (BuildEvaluationProgram, from the plan this step's
  // program was built from) on its micro-batches, this rank's, shaped as
  // Run's: forward only, without a gradient, and returns the mean loss. The
  // training state is read, not written; an offloaded optimizer's pending
  // update is applied first (FinishUpdate), so the parameters evaluated are
  // the last finished step's and the run goes on with the same values as
  // without the evaluation. Every rank must call it alike (the loss is summed
  // over the world).
  // REQUIRES: evaluation.evaluation, built for this program's plan;
  // micro_batches.size() == evaluation.micro_batches. Throws as Run does.
  EvaluationResult Evaluate(const StepProgram& evaluation, const std::vector<at::Tensor>& micro_batches);

  // What the out-of-memory message ends with: how to plan again
  // (planner/replan_advice.h). Empty: the message says what failed only.
  void SetOutOfMemoryAdvice(std::string advice) { out_of_memory_advice_ = std::move(advice); }

  // Called with the step's global gradient norm (before clipping) once it is
  // on the host, before any parameter changes; returning false skips the
  // step's AdamW updates (its ops still run, as no-ops, so the program and
  // the record stay whole; the step count still advances). Every rank must
  // decide alike: the norm is the same on every rank.
  void SetUpdateGate(std::function<bool(double grad_norm)> gate) { update_gate_ = std::move(gate); }

  // Offloaded optimizer: applies the update the last Run left pending (the
  // next Run would apply it beside its first forward) and copies the
  // updated shards up; returns when the parameters and optimizer state are
  // those of a finished step. Call before reading or saving them (a
  // checkpoint, the final weights). Does nothing when nothing is pending.
  void FinishUpdate();

 private:
  struct Activation {
    at::Tensor input;   // detached leaf (blocks, head); undefined for the embedding
    at::Tensor output;  // unit output; the micro-batch loss for the head
  };
  using Key = std::pair<int, int>;  // (unit, micro-batch)
  struct Pending;                   // a collective in flight
  class CopyStreams;

  // Checks the micro-batches (shape, vocabulary) and moves them to the
  // device as inputs_ and targets_ — `into_graph`: into the buffers the
  // step's CUDA graph reads (made at the first such call), where a batch
  // must have no loss mask. REQUIRES: nothing; throws UserError.
  void LoadBatches(const std::vector<at::Tensor>& micro_batches, int64_t expected, bool into_graph);
  // The step's CUDA graph (StepProgram::cuda_graph): whether this
  // interpreter has one (a GPU; none without CUDA), whether it is captured,
  // and the captured ops issued as it — captured, then launched, on the
  // step's second Run; launched, on every later one.
  bool Graphed() const;
  bool GraphCaptured() const;
  void RunGraph(int rank, bool replay);
  // Issues one op of `program` (measured; out of memory named with the op).
  void Issue(const StepProgram& program, const StepOp& op, int rank);
  void Perform(const StepOp& op);
  void WaitForDeps(const StepOp& op);
  // Makes the current stream wait for collective `op_id` and every
  // collective issued before it on the same stream (no host block on GPUs).
  void FinishThrough(int op_id);
  void Track(const StepOp& op, std::shared_ptr<CollectiveWork> work, Communicator* group,
             std::vector<at::Tensor> keep_alive = {});
  Communicator* GroupFor(const StepOp& op) const;

  void Forward(int unit, int mb);
  void EvaluationForward(int unit, int mb);
  at::Tensor HeadLoss(const at::Tensor& normed, const at::Tensor& weight, int mb, bool fused,
                      const at::Tensor& weight_grad_into);
  // The gradient each micro-batch's loss is seeded with in backward: the
  // step's loss is the mean over its micro-batches.
  double HeadSeed() const { return 1.0 / static_cast<double>(program_.micro_batches); }
  void Recompute(int unit, int mb);
  void Backward(int unit, int mb);
  void Gather(const StepOp& op);
  void ReduceScatter(const StepOp& op);
  void AccumulateShard(const StepOp& op);
  void LocalReduce(const StepOp& op);
  void AllReduceUnit(const StepOp& op);
  void GradNorm(const StepOp& op);
  void AllReduceGradNorm(const StepOp& op);
  void ClipGradients(const StepOp& op);
  void AllReduceLoss(const StepOp& op);
  void OptimizerStep(const StepOp& op);
  void CopyGradsToHost(const StepOp& op);
  void CpuOptimizerStep(const StepOp& op);
  void CopyParamsToDevice(const StepOp& op);
  void CopyParamsForGather(const StepOp& op);
  void CopyMasterToDevice(const StepOp& op);
  void CopyMasterToHost(const StepOp& op);
  // Unit u's view of its gradient staging (its buffer, or its slot), and of
  // where its CPU update writes the compute-dtype shard: its buffer or slot,
  // or (parameters streamed) the unit's own host shard.
  at::Tensor HostGradFor(int unit);
  at::Tensor HostComputeFor(int unit);
  bool Sharded(int unit) const { return units_.at(unit).group_size() > 1; }

  const LlamaModel& model_;
  std::vector<FlatUnit>& units_;
  AdamW& optimizer_;
  StepProgram program_;
  at::Device device_;
  AttentionLayout window_;  // the whole window's layout: the RoPE table of positions 0..seq_len-1
  bool document_mask_ = false;  // documents attend under the layout's mask, not flash varlen
  StepComms comms_;
  bool offload_ = false;         // the optimizer runs on the host
  bool params_on_host_ = false;  // the fp32 master (and, with offload_, the compute shard) lives on the host
  bool stages_every_unit_ = false;  // offload_ with a host buffer per unit, not slots (OffloadLayout)
  std::set<Key> recomputed_;  // (unit, micro-batch) with a recompute op: forward keeps only the input
  // The step's recorder and the evaluation's (its own op ids); recorder_ is
  // the one in use.
  std::unique_ptr<StepRecorder> step_recorder_, eval_recorder_;
  size_t eval_ops_ = 0;
  StepRecorder* recorder_ = nullptr;
  bool evaluating_ = false;  // Evaluate: forward ops run EvaluationForward
  // Offload: the pinned host staging (fp32 gradient shards down,
  // compute-dtype shards up; OffloadLayout: one buffer per unit, or slots
  // each the largest unit's shard, unit u taking slot u % slots) and the
  // copy streams.
  std::vector<at::Tensor> host_grads_, host_compute_;
  std::unique_ptr<CopyStreams> copies_;
  std::map<int, std::unique_ptr<Pending>> pending_;  // op id -> collective in flight

  // Per-step state.
  std::vector<at::Tensor> inputs_, targets_;  // per micro-batch, on device_
  // Per micro-batch, under a loss mask (executor/data/micro_batch.h): the
  // rows of the flattened targets that are trained (undefined: all), and
  // what the head's summed loss is divided by (0: the targets' count).
  std::vector<at::Tensor> trained_rows_;
  std::vector<double> loss_denominator_;
  // Attention kept inside documents (StepProgram::document_attention): each
  // micro-batch's spans, found on the host as it is loaded, and its layout
  // on the device from its embedding's forward to its embedding's backward
  // (an evaluation's: to its head), as the program allocates it.
  std::vector<DocumentSpans> spans_;
  std::map<int, AttentionLayout> layouts_;
  const AttentionLayout& LayoutFor(int mb) const {
    return program_.document_attention ? layouts_.at(mb) : window_;
  }
  void MakeLayout(int mb);
  std::map<Key, Activation> activations_;
  std::map<int, at::Tensor> eval_hidden_;  // evaluation: micro-batch -> the last unit's output
  std::map<int, at::Tensor> grad_flowing_;  // micro-batch -> dL/d(output of the unit below)
  std::map<int, at::Tensor> reduce_input_;  // unit -> its gradient in the reduce dtype, read by the reduce-scatter
  std::map<int, at::Tensor> reduced_shard_;  // reduce-scatter op id -> the shard it writes
  std::map<int, at::Tensor> param_staging_;   // unit -> its compute shard copied up for the next gather
  std::map<int, at::Tensor> master_staging_;  // unit -> its fp32 master copied up for the GPU AdamW
  // unit -> its gradient's sum of squares, from the widening pass of its
  // last local reduction (FlatUnit::AccumulateIntoGrad): the grad norm op
  // reads no gradient of these units again.
  std::map<int, at::Tensor> grad_square_sum_;
  at::Tensor loss_sum_, norm_sq_;
  double grad_norm_ = 0;
  bool skip_update_ = false;
  double clip_scale_ = 1;  // offload: the factor the host update applies to this step's gradients
  // Offload: a step's update, applied by the next step's cpu adamw ops — the
  // scalars (learning rate, bias corrections, clipping factor) of a step
  // whose gradients wait in the units' grad(); empty when there is nothing to
  // apply (no step yet, or the update gate refused it).
  std::optional<AdamWScalars> next_update_;  // left by the last Run

  // The step's CUDA graph (step_graph.h) and what it needs to stay put
  // between replays: each micro-batch's tokens and the step's loss where it
  // reads and writes them, and the memory the capture measured for each
  // captured op (a replay's own measure: it allocates nothing).
#ifdef LLMPLAN_WITH_CUDA
  std::unique_ptr<StepGraph> graph_;
#endif
  size_t captured_ops_ = 0;  // the program's first ops (StepOp::captured)
  int64_t runs_ = 0;         // Runs finished
  std::vector<at::Tensor> graph_tokens_, graph_targets_;
  at::Tensor graph_loss_;
  std::vector<OpMeasurement> captured_memory_;  // by position among the captured ops
  std::optional<AdamWScalars> applying_;     // applied by this Run's cpu adamw ops
  std::function<bool(double)> update_gate_;
  std::string out_of_memory_advice_;
  std::vector<int> executed_;
};

}  // namespace llmplan::executor
