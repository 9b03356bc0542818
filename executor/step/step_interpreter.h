// StepInterpreter: runs one optimizer step by interpreting the StepProgram the
// planner built for the plan — the program the simulator prices — performing
// exactly its operations, in its order (step_program.h's ordering rule), and
// measuring each where it runs (step_recorder.h). Nothing is decided here that
// the program does not say: which blocks keep only their input is read from
// its recompute ops, every reduction, the norm, the clipping and the loss are
// its ops.
//
// How each op runs (S = the unit's shard group size, R = its replicas; an
// edge unit kept whole by replicate_edges has S = 1 on every rank):
//   all-gather      S > 1: the compute-dtype shard all-gathered on the shard
//                   group's gather communicator into the unit's compute buffer
//                   (allocated at issue) — with Plan::cast_at_gather a cast
//                   of the master made on a side stream just before, instead
//                   of a kept shard; S = 1: the fp32 master cast into it.
//   forward         the unit on the previous unit's output, detached (a fresh
//                   leaf), so each unit's autograd graph ends at its own input;
//                   under NoGradGuard when the program recomputes it later.
//   recompute       the block's forward again, with grad.
//   backward        torch::autograd::backward on that unit alone into its
//                   compute-dtype gradient buffer (the head's from the loss,
//                   seeded with 1 / grad_accum); S > 1: then the gradient is
//                   cast to the reduce dtype (the reduce-scatter's private
//                   input) and the compute-dtype buffer released.
//   release         the gathered buffer's bytes back to the allocator.
//   reduce-scatter  that copy, on the shard group's reduction communicator,
//                   into a temporary shard.
//   accumulate      the compute stream waits for it; grad += shard / S
//                   (x gradient_scale); the temporaries are dropped.
//   reduce-local    S = 1: grad += compute-dtype gradient (x gradient_scale),
//                   the latter released.
//   all-reduce      a unit's fp32 gradient summed over the replica group (it
//                   was pre-scaled by 1/R, so the sum is the mean) — over the
//                   world for an edge unit kept whole (replicate_edges).
//   grad norm / all-reduce grad norm / clip
//                   sum of squares of this rank's shards, summed over the shard
//                   group only (replicas hold identical shards; a unit kept
//                   whole counts on the group's first rank only), read on the
//                   host, gradients scaled when above the limit.
//   all-reduce step loss  over the world: the reported loss is the job's mean.
//   adamw           the fused update of the unit's fp32 shard, writing the
//                   compute-dtype shard the next gathers send.
//   d2h grads / cpu adamw / h2d params   the offloaded optimizer: a step's
//                   gradient shards stay unclipped (clip only reads the
//                   norm) and are applied in the NEXT Run, beside its first
//                   forward, by the threaded CPU AdamW (cpu_adamw.h) with
//                   that step's learning rate and clipping factor, writing
//                   pinned compute-dtype staging that is copied up into the
//                   compute shard. Where the gradient waits
//                   (Plan::offload_staging): staged per unit, each is copied
//                   on its own stream into the unit's pinned host buffer in
//                   its step's backward, right after its last reduction;
//                   through the slots it stays in the unit's fp32 gradient
//                   and the next Run copies it into pinned slot
//                   u % kOffloadStagingSlots beside the update of the unit
//                   before. The run's first step (and the step after
//                   FinishUpdate) has nothing to apply: its cpu adamw and
//                   h2d params ops (and, through the slots, its d2h grads)
//                   run as no-ops.
//   h2d master / adamw / d2h master   offload params: the fp32 master lives in
//                   pinned host memory; a device copy of it exists only from
//                   its h2d op to its d2h op, around the GPU AdamW.
//   h2d params (before a gather)      offload optimizer+params: the
//                   compute-dtype shard lives in pinned host memory (the CPU
//                   AdamW writes it there) and is copied into a device buffer
//                   just ahead of each gather, which sends it (or, on one GPU,
//                   copies it into the compute buffer) and drops it.
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
#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan::executor {

class Communicator;
class CollectiveWork;
class CollectiveWatchdog;

// The communicators a step uses. All null: one process (no collectives).
struct StepComms {
  Communicator* shard = nullptr;         // plan.shard_group_size ranks: all-gathers
  Communicator* shard_reduce = nullptr;  // the same ranks: reduce-scatters, the norm's all-reduce
  Communicator* replica = nullptr;       // plan.ReplicaGroups() ranks
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

class StepInterpreter {
 public:
  // Checks that the program can run with these units and communicators.
  // REQUIRES: units were made for `model` on `device` (MakeShardedUnits for
  // `plan`); program built from `plan`; plan.model matches the model;
  // optimizer state on the host iff the plan offloads the optimizer. Throws
  // UserError for a program this executor cannot run (several GPUs without
  // communicators of the plan's group sizes).
  StepInterpreter(const Plan& plan, const LlamaModel& model, std::vector<FlatUnit>& units, AdamW& optimizer,
                  StepProgram program, const at::Device& device, StepComms comms = {});
  ~StepInterpreter();
  StepInterpreter(const StepInterpreter&) = delete;
  StepInterpreter& operator=(const StepInterpreter&) = delete;

  const StepProgram& program() const { return program_; }

  // Runs one optimizer step on plan.grad_accum micro-batches (this rank's),
  // each an int64 [micro_batch, seq_len + 1] token tensor on any device
  // (inputs are the first seq_len columns, targets the last seq_len).
  // Gradients are zeroed at the start, so after Run the units' grad() hold
  // this step's gradients, clipped (with the optimizer offloaded: not
  // clipped; the host update applies the factor). Returns after the device
  // finished. With the optimizer offloaded the step's update is left
  // pending for the next Run: see FinishUpdate.
  // REQUIRES: micro_batches.size() == plan.grad_accum. Throws UserError for a
  // wrong shape or a token id outside [0, vocab) (checked on the host before
  // any kernel when the batch is on the CPU), and when an op runs out of
  // memory (out_of_memory.h: the op, measured and predicted memory, a plan
  // that would fit).
  StepResult Run(const std::vector<at::Tensor>& micro_batches);

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

  void Perform(const StepOp& op);
  void WaitForDeps(const StepOp& op);
  // Makes the current stream wait for collective `op_id` and every
  // collective issued before it on the same stream (no host block on GPUs).
  void FinishThrough(int op_id);
  void Track(const StepOp& op, std::shared_ptr<CollectiveWork> work, Communicator* group,
             std::vector<at::Tensor> keep_alive = {});
  Communicator* GroupFor(const StepOp& op) const;

  void Forward(int unit, int mb);
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
  // Unit u's view of its gradient staging (its buffer, or its slot), and of
  // where its CPU update writes the compute-dtype shard: its buffer or slot,
  // or (parameters streamed) the unit's own host shard.
  at::Tensor HostGradFor(int unit);
  at::Tensor HostComputeFor(int unit);
  bool Sharded(int unit) const { return units_.at(unit).group_size() > 1; }

  const Plan& plan_;
  const LlamaModel& model_;
  std::vector<FlatUnit>& units_;
  AdamW& optimizer_;
  StepProgram program_;
  at::Device device_;
  RopeTable rope_;
  StepComms comms_;
  bool offload_ = false;         // the optimizer runs on the host
  bool params_on_host_ = false;  // the fp32 master (and, with offload_, the compute shard) lives on the host
  bool stages_every_unit_ = false;  // offload_ with a host buffer per unit (Plan::offload_staging), not slots
  std::set<Key> recomputed_;  // (unit, micro-batch) with a recompute op: forward keeps only the input
  StepRecorder recorder_;
  // Offload: the pinned host staging (fp32 gradient shards down,
  // compute-dtype shards up; Plan::offload_staging: one buffer per unit, or
  // kOffloadStagingSlots each the largest unit's shard, unit u taking slot
  // u % kOffloadStagingSlots) and the copy streams.
  std::vector<at::Tensor> host_grads_, host_compute_;
  std::unique_ptr<CopyStreams> copies_;
  std::map<int, std::unique_ptr<Pending>> pending_;  // op id -> collective in flight

  // Per-step state.
  std::vector<at::Tensor> inputs_, targets_;  // per micro-batch, on device_
  std::map<Key, Activation> activations_;
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
  std::optional<AdamWScalars> applying_;     // applied by this Run's cpu adamw ops
  std::function<bool(double)> update_gate_;
  std::vector<int> executed_;
};

}  // namespace llmplan::executor
