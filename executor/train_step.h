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
// Single process: collectives are local. An all-gather is the fp32 -> compute
// dtype cast of the master buffer; the gradient "reduction" is the cast-add of
// the compute-dtype gradient into the fp32 accumulator, done right after each
// unit's backward (reduce-scatter / all-reduce ops of one unit are then no-ops);
// the grad-norm all-reduce computes the global norm and clips. Programs for
// several GPUs or with offload are refused (they need the distributed executor).
#pragma once

#include <cstdint>
#include <map>
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

// The compute dtype a plan asks for.
at::ScalarType ComputeDtype(const Plan& plan);

// One FlatUnit per model unit on `device` (unsharded), initialised with the
// model's initial values from `seed` and gathered, ready to train.
std::vector<FlatUnit> MakeFlatUnits(const LlamaModel& model, const at::Device& device, at::ScalarType compute_dtype,
                                    uint64_t seed);

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
  // Checks that the program can run in one process.
  // REQUIRES: units were made for `model` on `device`; program built from
  // `plan`; plan.model matches the model. Throws UserError for a program this
  // executor cannot run (several GPUs, offload).
  StepInterpreter(const Plan& plan, const LlamaModel& model, std::vector<FlatUnit>& units, AdamW& optimizer,
                  StepProgram program, const at::Device& device);
  ~StepInterpreter();
  StepInterpreter(const StepInterpreter&) = delete;
  StepInterpreter& operator=(const StepInterpreter&) = delete;

  const StepProgram& program() const { return program_; }

  // Runs one optimizer step on plan.grad_accum micro-batches, each an int64
  // [micro_batch, seq_len + 1] token tensor on any device (inputs are the
  // first seq_len columns, targets the last seq_len). Gradients are zeroed at
  // the start, so after Run the units' grad() hold this step's (clipped)
  // gradients.
  // REQUIRES: micro_batches.size() == plan.grad_accum. Throws UserError for a
  // wrong shape or a token id outside [0, vocab) (checked on the host before
  // any kernel when the batch is on the CPU).
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

  const Plan& plan_;
  const LlamaModel& model_;
  std::vector<FlatUnit>& units_;
  AdamW& optimizer_;
  StepProgram program_;
  at::Device device_;
  bool program_gathers_ = false;  // false: the optimizer refreshes compute copies itself
  RopeTable rope_;
  std::unique_ptr<compat::OpTimer> timer_;

  // Per-step state.
  std::vector<at::Tensor> inputs_, targets_;  // per micro-batch, on device_
  std::map<Key, Activation> activations_;
  std::map<int, at::Tensor> grad_flowing_;  // micro-batch -> dL/d(output of the unit below)
  at::Tensor loss_sum_;
  bool clipped_ = false;
  double grad_norm_ = 0;
};

}  // namespace llmplan::executor
