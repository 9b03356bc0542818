// StepInterpreter: runs one optimizer step by interpreting the StepProgram the
// planner built for the plan — the same program the simulator prices — one
// operation at a time, and times every operation (CUDA events on GPU, wall
// clock on CPU) so each measurement has a predicted twin with the same op id.
//
// The model runs unit by unit, explicitly:
//   forward   unit i takes unit i-1's output detached (a fresh leaf that
//             requires grad), so each unit's autograd graph ends at its own
//             input; a checkpointed block runs under NoGradGuard and keeps only
//             its input.
//   recompute a checkpointed block re-runs its forward with grad enabled.
//   backward  torch::autograd::backward({output}, {grad_output}) on that unit
//             alone; the input's .grad is the grad_output of unit i-1. The
//             head's "output" is the micro-batch loss, seeded with
//             1 / grad_accum so accumulated gradients are the mean.
//
// Collectives (the shard group of plan.shard_group_size ranks, the replica
// group of plan.ReplicaGroups() ranks; see comm/process_groups.h):
//   all-gather     comm.AllGather(this rank's compute-dtype shard, compute)
//                  on the shard group, issued asynchronously; a group of one
//                  is the local cast master -> compute.
//   release        frees the gathered buffer's bytes (FlatUnit::ReleaseCompute).
//   reduce-scatter compute_grad cast to plan.reduce_dtype (a temporary; the
//                  unsharded gradient's bytes are freed at once and re-given,
//                  zeroed, to the next backward that needs them) reduce-
//                  scattered into a temporary shard; when it completes,
//                  grad += shard / S.
//   all-reduce     of a unit (no_shard; hybrid across replica groups on the
//                  last micro-batch): the fp32 grad shard summed over the
//                  replica group, then / R. With no reduce-scatter (S = 1) the
//                  gradient was cast-added into grad after each backward.
//   grad norm      the sum of squares of this rank's grad shards, summed over
//                  the shard group only (replicas hold identical shards after
//                  their all-reduce, so summing over the world would count
//                  each shard R times), then clipping.
// So gradients are averaged over ranks x micro-batches and equal single-
// process training on the concatenated batch.
//
// Asynchrony: every collective is issued in program order and not waited for;
// an operation first waits for the collectives among its deps (and an
// operation that reads a unit's grad shard for all that unit's pending
// reductions). Prefetch is the program's order: gathers appear ahead of the
// forward that needs them. A collective's op time is its issue time; its wait
// lands on the op that depends on it.
//
// Offload (plan.offload == optimizer): master and AdamW state in pinned host
// memory; "d2h grads" copies the gradient shard down (its own stream on
// CUDA), "cpu adamw" runs the threaded CPU AdamW (cpu_adamw.h) and casts the
// result into a host staging shard, "h2d params" copies that up into the
// compute shard the next gathers send. Parameter offload is refused.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "executor/flat_unit.h"
#include "executor/model/llama_model.h"
#include "executor/optimizer/adamw.h"
#include "planner/plan.h"
#include "planner/step_program.h"

namespace llmplan::compat {
class OpTimer;
}

namespace llmplan::executor {

class Communicator;
class CollectiveWork;
class CollectiveWatchdog;

// The communicators a step uses. All null: one process (collectives local).
struct StepComms {
  Communicator* shard = nullptr;    // plan.shard_group_size ranks
  Communicator* replica = nullptr;  // plan.ReplicaGroups() ranks
  Communicator* world = nullptr;    // every rank: the step's mean loss
  CollectiveWatchdog* watchdog = nullptr;  // optional: watches every collective issued
};

// The compute dtype a plan asks for.
at::ScalarType ComputeDtype(const Plan& plan);

// One FlatUnit per model unit on `device` (unsharded), initialised with the
// model's initial values from `seed` and gathered, ready to train.
std::vector<FlatUnit> MakeFlatUnits(const LlamaModel& model, const at::Device& device, at::ScalarType compute_dtype,
                                    uint64_t seed);

// One FlatUnit per model unit for rank `shard_rank` of a shard group of
// plan.shard_group_size, its master shard in host memory when the plan
// offloads the optimizer. Every rank draws the whole unit's initial values
// from plan.seed (on the host, one unit at a time) and keeps its slice, so
// the model equals the single-process one. Unsharded units are gathered
// (ready to train); sharded ones start released (the program gathers them).
// REQUIRES: plan.Validate() passes; 0 <= shard_rank < plan.shard_group_size.
std::vector<FlatUnit> MakeShardedUnits(const LlamaModel& model, const Plan& plan, const at::Device& device,
                                       int shard_rank);

// The whole unit's fp32 values, unpadded, on the host: this rank's master
// when unsharded, else the master shards all-gathered over `shard` (a
// collective: every rank of the shard group calls it for the same unit).
// Offloaded masters are read from the host. `name` names the unit in the
// watchdog's message when the all-gather hangs (watched when non-null).
// REQUIRES: shard non-null when unit.group_size() > 1, of that size.
at::Tensor FullMaster(FlatUnit& unit, Communicator* shard, CollectiveWatchdog* watchdog = nullptr,
                      const std::string& name = "unit");

// The master buffers' lengths, for AdamW.
std::vector<int64_t> ShardNumels(const std::vector<FlatUnit>& units);

struct StepResult {
  double loss = 0;       // mean over the step's micro-batches
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;         // learning rate applied
  std::vector<double> op_seconds;  // indexed by StepOp::id
  // Sums of op_seconds by kind of work.
  double forward_s = 0;    // forward (incl. the head's loss)
  double recompute_s = 0;  // checkpointed blocks' recompute
  double backward_s = 0;   // backward (incl. the local gradient cast-add)
  double optimizer_s = 0;  // grad norm, clipping and AdamW
  double comm_s = 0;       // gathers (casts), releases, reductions
};

class StepInterpreter {
 public:
  // Checks that the program can run with these units and communicators.
  // REQUIRES: units were made for `model` on `device` (MakeShardedUnits for
  // `plan`); program built from `plan`; plan.model matches the model;
  // optimizer state on the host iff the plan offloads the optimizer. Throws
  // UserError for a program this executor cannot run (parameter offload;
  // several GPUs without communicators of the plan's group sizes).
  StepInterpreter(const Plan& plan, const LlamaModel& model, std::vector<FlatUnit>& units, AdamW& optimizer,
                  StepProgram program, const at::Device& device, StepComms comms = {});
  ~StepInterpreter();
  StepInterpreter(const StepInterpreter&) = delete;
  StepInterpreter& operator=(const StepInterpreter&) = delete;

  const StepProgram& program() const { return program_; }

  // Runs one optimizer step on plan.grad_accum micro-batches (this rank's),
  // each an int64
  // [micro_batch, seq_len + 1] token tensor on any device (inputs are the
  // first seq_len columns, targets the last seq_len). Gradients are zeroed at
  // the start, so after Run the units' grad() hold this step's (clipped)
  // gradients.
  // REQUIRES: micro_batches.size() == plan.grad_accum. Throws UserError for a
  // wrong shape or a token id outside [0, vocab) (checked on the host before
  // any kernel when the batch is on the CPU).
  // With several ranks the loss and grad norm are global (all ranks agree).
  StepResult Run(const std::vector<at::Tensor>& micro_batches);

 private:
  struct Activation {
    at::Tensor input;   // detached leaf (blocks, head); undefined for the embedding
    at::Tensor output;  // unit output; the micro-batch loss for the head
  };
  using Key = std::pair<int, int>;  // (unit, micro-batch)

  void Forward(int unit, int mb);
  void Recompute(int unit, int mb);
  void Backward(int unit, int mb);
  void ClipOnce();
  // Collectives in flight.
  struct Pending;
  void Track(int op_id, int unit, std::shared_ptr<CollectiveWork> work, std::function<void()> finish,
             std::vector<at::Tensor> keep_alive, const std::string& what, Communicator* group);
  void Finish(int op_id);      // waits for one pending collective and applies its result
  void FinishUnit(int unit);   // every pending collective of `unit`
  void FinishAll();
  void Gather(const StepOp& op);
  void ReduceScatter(const StepOp& op);
  void AllReduceUnit(const StepOp& op);
  void GradNorm();
  void CopyGradsToHost(const StepOp& op);
  void CpuOptimizerStep(const StepOp& op);
  void CopyParamsToDevice(const StepOp& op);
  bool Sharded(int unit) const { return units_.at(unit).group_size() > 1; }

  const Plan& plan_;
  const LlamaModel& model_;
  std::vector<FlatUnit>& units_;
  AdamW& optimizer_;
  StepProgram program_;
  at::Device device_;
  bool program_gathers_ = false;  // false: the optimizer refreshes compute copies itself
  RopeTable rope_;
  std::unique_ptr<compat::OpTimer> timer_;
  StepComms comms_;
  bool offload_ = false;
  // Offload: pinned host buffers per unit (fp32 grad shard, compute-dtype
  // shard staged for the copy up) and the copy streams' completion events.
  std::vector<at::Tensor> host_grads_, host_compute_;
  struct CopyStreams;
  std::unique_ptr<CopyStreams> copies_;
  std::map<int, std::unique_ptr<Pending>> pending_;  // op id -> collective in flight
  std::map<int, int> copy_of_unit_;                   // unit -> op id of its gradient copy down (this step)

  // Per-step state.
  std::vector<at::Tensor> inputs_, targets_;  // per micro-batch, on device_
  std::map<Key, Activation> activations_;
  std::map<int, at::Tensor> grad_flowing_;  // micro-batch -> dL/d(output of the unit below)
  at::Tensor loss_sum_;
  bool clipped_ = false;
  double grad_norm_ = 0;
};

}  // namespace llmplan::executor
