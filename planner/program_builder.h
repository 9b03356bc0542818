// ProgramBuilder: builds the StepProgram of one optimizer step from a plan.
// The public entry point is BuildStepProgram (planner/step_program.h);
// docs/ARCHITECTURE.md has the whole picture. Every decision about order,
// prefetch and which collective runs where is made here, once; the simulator
// and the executor only interpret the result.
//
// Build() runs the phases in logical order, one file each:
//   program_builder.cc   units, persistent and host memory, op bookkeeping
//   program_forward.cc   per micro-batch: gathers, forwards, releases
//   program_backward.cc  per micro-batch: recompute, backwards, gradient reductions
//   program_step_end.cc  gradient norm, clipping, the GPU optimizer, the loss
//   program_offload.cc   the offloaded optimizer's copies and host updates,
//                        which the forward and backward place
//   program_evaluation.cc  an evaluation's forward-only program instead
//   program_order.cc     ToIssueOrder: logical order -> issue order
//   program_capture.cc   MarkCapturedOps: what a CUDA graph holds
// What the phases hand each other is in program_state.h.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "planner/hardware_profile.h"
#include "planner/memory_model.h"
#include "planner/plan.h"
#include "planner/program_state.h"
#include "planner/program_tensors.h"
#include "planner/step_program.h"

namespace llmplan {

class ProgramBuilder {
 public:
  // REQUIRES: plan.Validate() passes; both outlive the builder.
  // `op_names`: as BuildStepProgram's.
  ProgramBuilder(const Plan& plan, const HardwareProfile& profile, bool op_names = true);
  ProgramBuilder(const ProgramBuilder&) = delete;
  ProgramBuilder& operator=(const ProgramBuilder&) = delete;

  // The ops in logical order (forward and backward per micro-batch, then the
  // step's end); ToIssueOrder turns that into the order the host issues them.
  StepProgram Build();
  // The evaluation's program (BuildEvaluationProgram), in logical order.
  // REQUIRES: micro_batches >= 1; neither Build has run on this builder.
  StepProgram BuildEvaluation(int micro_batches);

 private:
  // --- program_builder.cc: the program's frame ---
  void MakeUnits();       // the units, and the phases' state sized for them
  void MakePersistent();  // the device's and the host's memory for the whole step
  int Add(StepOp op);  // assigns the id, tidies deps; returns the id
  // "<what> <unit>[ bwd][ mb <mb>]", e.g. "all-gather block 3 bwd mb 0"
  // (mb < 0: none). Empty without op_names_.
  std::string OpName(std::string_view what, int u, int mb = -1, bool backward = false) const;
  // A copy of `bytes` of unit u between pinned host memory and the device
  // (one of the copy kinds) on its direction's copy stream, named as OpName;
  // deps and memory events are the caller's.
  StepOp HostCopy(OpKind kind, int u, std::string_view what, double bytes, int mb = -1, bool backward = false) const;
  // `call` on `inputs`: its events appended to `events`, the ids it returns
  // in `result` (which must not be `inputs`).
  void CallMemoryModel(MemoryCall call, std::span<const int> inputs, std::vector<MemoryDelta>& events,
                       std::vector<int>& result);

  // --- program_forward.cc ---
  // Micro-batch mb's forward, unit by unit; fills `results` for its backward.
  // Gathers and releases through gathered_; waits for host_'s updates;
  // makes the fused loss's gradient in grads_.
  void Forward(int mb, ForwardResults& results);
  int Gather(int u, int mb, bool backward);
  // Parameters kept on the host: unit u's compute-dtype shard streams in just
  // before its gather, after `deps` (the gather's own waits).
  int CopyParamsForGather(int u, int mb, bool backward, const std::vector<int>& deps);
  int Release(int u, int mb, int after, bool backward);
  int UnitForward(int u, int mb, bool waits_for_update, ForwardResults& results);
  // Makes unit u's compute-dtype gradient in `op` unless it exists: its
  // bytes at the op's start, and its zeroing priced into the op's work.
  void MakeComputeGrad(int u, StepOp& op);

  // --- program_evaluation.cc ---
  // Micro-batch mb of an evaluation, unit by unit; returns its head's op.
  int EvaluationForward(int mb);

  // --- program_backward.cc ---
  // Micro-batch mb's backward from the head down, on `results` of its forward.
  // Takes each unit's gradient in grads_ to its reduction (grads_.final_op on
  // the last micro-batch); the delayed update's host ops go in host_.
  void Backward(int mb, ForwardResults& results);
  int GatherForBackward(int u, int mb, const ForwardResults& results);
  int Recompute(int u, int mb, std::vector<int> deps, std::vector<int>& saved);
  // The reduce-scatter two before the next backward, which that backward
  // waits for, its shard accumulated first (the executor waits on it there).
  int ThrottleReductions();
  // `flowing`: the gradient from the unit above (the head's backward starts it).
  int UnitBackward(int u, int mb, std::vector<int> deps, std::vector<int>& saved, int& flowing);
  // After unit u's backward `bwd`: one copy of the state per rank adds the
  // gradient into the fp32 one at once; a sharded unit reduce-scatters it.
  void ReduceLocally(int u, int mb, int bwd, bool last_mb);
  void ReduceScatter(int u, int mb, int bwd, bool last_mb);
  // Accumulates the reduced shards of the pending reduce-scatters issued up
  // to and including `rs_id`, in issue order.
  void AccumulateThrough(int rs_id);
  // A micro-batch's gradient of unit u is reduced into its fp32 gradient by
  // op `reduced`: what follows across replicas (`last_mb`: the step's last
  // micro-batch) and, staged per unit, towards the host.
  void AfterReduction(int u, int reduced, bool last_mb);

  // --- program_step_end.cc ---
  // On grads_ (every reduction in), then the clip op and the last loss.
  int ClipGradients();  // returns the clipping op: every optimizer update waits for it
  int GradNorm();       // this rank's sum of squares, once every reduction is in
  void OptimizerStep(int clip);
  int AdamW(int u, std::vector<int> deps);  // unit u's fused AdamW on the GPU
  int CopyMasterUp(int u, int clip);  // offload params: unit u's fp32 master shard
  void LossAllReduce(int loss);

  // --- program_offload.cc ---
  // The chain of host ops in host_, placed by the forward and the backward.
  // Unit u's final fp32 gradient shard down to its host staging once op
  // `after` (-1: none) has ended.
  void CopyGradientsToHost(int u, int after);
  StepOp CpuAdamWOp(int u) const;  // unit u's host update, priced; deps are the caller's
  // The previous step's update of unit u beside this step's first forward,
  // and its compute-dtype shard back up (sets host_.params_ready[u]).
  void UpdateOnHost(int u);
  // Delayed update: the previous step's update of unit u right after this
  // step's backward `bwd` of u, and its parameters up once that backward is
  // done with the old ones.
  void DelayedUpdateOnHost(int u, int bwd);
  // Delayed update: the first slots' gradients down at the step's start.
  void CopyFirstSlotsDown();

  // --- what the phases ask of the plan and the units ---
  int PlanShardGroup() const { return plan_.shard_group_size; }
  const Unit& UnitAt(int u) const { return program_.units[u]; }
  int NumUnits() const { return static_cast<int>(program_.units.size()); }
  // Unit u's own shard group and replicas (an edge unit kept whole: 1 and gpus).
  int ShardGroup(int u) const { return UnitAt(u).group_size; }
  int Replicas(int u) const { return plan_.UnitReplicas(u); }
  double PaddedParams(int u) const { return static_cast<double>(UnitAt(u).padded_params); }
  double ShardParams(int u) const { return PaddedParams(u) / ShardGroup(u); }  // this rank's elements of unit u
  bool GroupSpansNodes(int group) const { return group > plan_.gpus_per_node; }
  // Whether ranks 0, stride, 2 stride, ... (`count` of them; rank 0's group)
  // cross from one GPU island of the node to another (HardwareProfile::islands).
  bool GroupSpansIslands(int count, int stride = 1) const;
  double ReduceBytes() const { return DTypeBytes(plan_.reduce_dtype); }
  double ParamBytes() const { return DTypeBytes(plan_.param_dtype); }
  // gradient_path.h: AdamW reads each unit's compute-dtype gradient; no fp32 one.
  bool AdamWReadsComputeGrad() const;
  bool GathersParams(int u) const { return !UnitAt(u).resident; }
  bool Recomputed(int u) const { return UnitAt(u).kind == UnitKind::kBlock && plan_.IsCheckpointed(UnitAt(u).layer); }
  // The (vocab x hidden) matrix the head multiplies by: its own or, tied, the embedding's.
  double OutputMatrixParams() const { return static_cast<double>(plan_.model.vocab * plan_.model.hidden); }
  // Gathered params stay from forward to backward (shard_grad_op; the head,
  // whose backward follows its forward at once; the tied embedding the head uses).
  // In an evaluation: from a unit's gather to the end of its micro-batch's
  // head (the head, and the tied embedding it reads).
  bool KeepsParamsThroughBackward(int u) const;
  // Whether the device keeps unit u's compute-dtype copy from step to step,
  // written by the update: a resident unit's whole copy, else the shard the
  // all-gathers send — not where a "gather" casts the fp32 master itself
  // (one GPU without offload, Plan::cast_at_gather) nor with the parameters
  // streamed from the host.
  bool KeepsComputeShard(int u) const;

  const Plan& plan_;
  const HardwareProfile& profile_;
  const bool op_names_;
  bool evaluating_ = false;  // BuildEvaluation: no backward follows any forward
  StepProgram program_;
  // Memory, tensor by tensor (planner/memory_model.h): the memory model's
  // calls recorded once each and stamped (planner/program_tensors.h).
  const ActivationShape shape_;
  ProgramTensors tensors_;
  RecordedMemoryCalls memory_calls_;
  std::vector<int> call_inputs_, call_result_;  // reused for the memory calls' arguments
  // State the phases share (program_state.h), sized by MakeUnits.
  GatheredUnits gathered_{0};
  GradientState grads_{0};
  HostUpdates host_{0};
};

// Puts a logically ordered program into issue order: each all-gather (and the
// host->device copy feeding it) moves up to just after the last of its deps
// and of the gathers before it, so it is issued ahead of the compute it
// overlaps; ids are renumbered; then every collective and copy gains a dep on
// the last compute op issued before it (rule 5 of step_program.h).
void ToIssueOrder(StepProgram& program);

// Plan::cuda_graph on a GPU (program_capture.cc): marks StepOp::captured on
// the ops the step's CUDA graph holds, in issue order, and sets
// StepProgram::cuda_graph when there is any.
void MarkCapturedOps(StepProgram& program);

}  // namespace llmplan
