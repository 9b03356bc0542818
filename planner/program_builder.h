// ProgramBuilder: the planner's internal builder of a StepProgram (the public
// entry point is BuildStepProgram in step_program.h). One instance builds one
// program; its phases live in one file each:
//   program_builder.cc   units, persistent memory, op bookkeeping, Build()
//   program_forward.cc   gathers, forwards, releases
//   program_backward.cc  recompute, backwards, gradient reductions
//   program_step_end.cc  gradient norm, clipping, optimizer (GPU or CPU), loss;
//                        the offloaded optimizer's copies and host updates
//   program_order.cc     the issue order (gathers hoisted) and rule-5 deps
// Every decision about order, prefetch and which collective runs where is made
// here, once; the simulator and the executor only interpret the result.
#pragma once

#include <array>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "planner/gradient_path.h"
#include "planner/hardware_profile.h"
#include "planner/memory_model.h"
#include "planner/plan.h"
#include "planner/program_tensors.h"
#include "planner/step_program.h"

namespace llmplan {

class ProgramBuilder {
 public:
  // REQUIRES: plan.Validate() passes; both outlive the builder.
  // `op_names`: as BuildStepProgram's.
  ProgramBuilder(const Plan& plan, const HardwareProfile& profile, bool op_names = true)
      : plan_(plan), profile_(profile), op_names_(op_names) {}
  ProgramBuilder(const ProgramBuilder&) = delete;
  ProgramBuilder& operator=(const ProgramBuilder&) = delete;

  // The ops in logical order (forward, backward per micro-batch, step end);
  // ToIssueOrder turns that into the order the host issues them.
  StepProgram Build();

 private:
  // --- program_builder.cc ---
  void MakeUnits();
  void MakePersistent();
  // The program's description of what its ops work on (StepProgram's batch,
  // dtypes, groups and offload layout).
  void DescribeRun();
  int Add(StepOp op);  // assigns the id, tidies deps; returns the id
  // "<what> <unit>[ bwd][ mb <mb>]", e.g. "all-gather block 3 bwd mb 0"
  // (mb < 0: none), built in one allocation: a 70B program names ~3,000
  // ops. Empty without op_names_.
  std::string OpName(std::string_view what, int u, int mb = -1, bool backward = false) const;
  // A copy of `bytes` of unit u between pinned host memory and the device
  // (one of the copy kinds) on its direction's copy stream, for
  // micro-batch mb (-1: the step's), named as OpName; deps and memory
  // events are the caller's.
  StepOp HostCopy(OpKind kind, int u, std::string_view what, double bytes, int mb = -1, bool backward = false) const;
  // The memory model's calls (planner/memory_model.h) the program makes.
  // Their tensors pass through the builder flattened: a SavedTensors as its
  // saved ids then its output.
  enum class MemoryCall {
    kEmbeddingForward,
    kBlockForward,         // keeping its graph
    kBlockForwardNoGraph,  // a checkpointed block's forward
    kHeadForward,
    kBlockRecompute,       // inputs: the forward's tensors
    kHeadBackward,         // inputs: the forward's tensors
    kBlockBackward,        // inputs: the forward's (or recompute's) tensors, then the gradient flowing in
    kEmbeddingBackward,    // inputs: as kBlockBackward
  };
  // The recording of `call` with `inputs`' pattern of absent ones, made at
  // its first use (planner/program_tensors.h): tensors_.Stamp makes the
  // call's events from it.
  const MemoryTemplate& Recorded(MemoryCall call, std::span<const int> inputs);
  // `call` on `inputs`: its events appended to `events`, the ids it returns
  // in `result` (which must not be `inputs`).
  void CallMemoryModel(MemoryCall call, std::span<const int> inputs, std::vector<MemoryDelta>& events,
                       std::vector<int>& result) {
    const MemoryTemplate& t = Recorded(call, inputs);
    events.reserve(events.size() + t.events.size());
    tensors_.Stamp(t, inputs, events, result);
  }

  // --- program_forward.cc ---
  void Forward(int mb);
  int Gather(int u, int mb, bool backward);
  int Release(int u, int mb, int after, bool backward);
  void FillForwardWork(int u, OpWork& w) const;   // planner/work_model.h
  void FillBackwardWork(int u, OpWork& w) const;
  // Makes unit u's compute-dtype gradient in `op` unless it exists: its
  // bytes at the op's start, and its zeroing priced into the op's work.
  void MakeComputeGrad(int u, StepOp& op);

  // --- program_backward.cc ---
  void Backward(int mb);
  // After unit u's backward: its local reduction or reduce-scatter (and, on
  // the last micro-batch, what follows it across replicas).
  void ReduceGradients(int u, int mb, int bwd, bool last_mb);
  // Accumulates the reduced shards of the pending reduce-scatters issued up
  // to and including `rs_id`, in issue order.
  void AccumulateThrough(int rs_id);
  // A micro-batch's gradient of unit u is reduced into its fp32 gradient by
  // op `reduced`: what follows across replicas (`last_mb`: the step's last
  // micro-batch) and, staged per unit, towards the host.
  void AfterReduction(int u, int reduced, bool last_mb);

  // --- program_step_end.cc ---
  void ClipGradients();
  void OptimizerStep();
  void LossAllReduce();
  // Offloaded optimizer, applying the previous step's gradients during this
  // step's first forward (Forward(0) calls UpdateOnHost one unit ahead, so
  // the host updates unit u + 1 while the GPU runs unit u's forward). Unit
  // u's final gradient shard copied to its host staging once op `after`
  // (-1: none) has ended: staged per unit, this step's gradient after its
  // last reduction (AfterReduction); through the slots, the previous step's
  // once the update that last read its slot is done.
  void CopyGradientsToHost(int u, int after);
  // The host update of unit u's shard (CPU AdamW, its m and v streamed from
  // NVMe when they live there), priced; its deps are the caller's.
  StepOp CpuAdamWOp(int u) const;
  // The host update of unit u from its staging, and the updated
  // compute-dtype shard back up: the first forward waits for it (sets
  // update_ready_[u]). Staged per unit it waits for nothing; through the
  // slots, unit 0's call first brings the first slots' gradients down.
  void UpdateOnHost(int u);
  // Delayed update (Plan::delayed_update): the previous step's update of
  // unit u on the host right after this step's backward `bwd` of u, and its
  // parameters up once that backward is done with the old ones. Units go in
  // backward order, so the slots cycle with the backward; the first slots'
  // gradients come down at the step's start (Forward(0)).
  void DelayedUpdateOnHost(int u, int bwd);

  // --- shared helpers ---
  int G() const { return plan_.shard_group_size; }
  int R() const { return plan_.ReplicaGroups(); }
  // Unit u's own shard group and replicas (an edge unit kept whole: 1 and gpus).
  int G(int u) const { return U(u).group_size; }
  int R(int u) const { return plan_.UnitReplicas(u); }
  // The group a unit's gradient all-reduce runs in: the replica group, or the
  // whole job for an edge unit kept whole under a sharded strategy.
  CommGroup ReplicaGroupOf(int u) const { return U(u).resident && Sharded() ? CommGroup::kWorld : CommGroup::kReplica; }
  bool Sharded() const { return plan_.strategy != ShardingStrategy::kNoShard; }
  bool GroupSpansNodes(int group) const { return group > plan_.gpus_per_node; }
  double ReduceBytes() const { return DTypeBytes(plan_.reduce_dtype); }
  double ParamBytes() const { return DTypeBytes(plan_.param_dtype); }
  // gradient_path.h: AdamW reads each unit's compute-dtype gradient; no fp32 one.
  bool AdamWReadsComputeGrad() const { return OptimizerReadsComputeGradient(plan_, profile_.device_kind != "cpu"); }
  double Tokens() const { return static_cast<double>(plan_.micro_batch * plan_.seq_len); }
  bool TiedEmbedding(int u) const { return plan_.model.tied_embeddings && u == 0; }
  int NumUnits() const { return static_cast<int>(p_.units.size()); }
  const Unit& U(int u) const { return p_.units[u]; }
  double Padded(int u) const { return static_cast<double>(U(u).padded_params); }
  double Shard(int u) const { return Padded(u) / G(u); }  // this rank's elements of unit u
  bool GathersParams(int u) const { return !U(u).resident; }
  bool Recomputed(int u) const { return U(u).kind == UnitKind::kBlock && plan_.IsCheckpointed(U(u).layer); }
  // The (vocab x hidden) matrix the head multiplies by: its own or, tied, the embedding's.
  double OutputMatrixParams() const { return static_cast<double>(plan_.model.vocab * plan_.model.hidden); }
  // Gathered params stay from forward to backward (shard_grad_op; the head,
  // whose backward follows its forward at once; the tied embedding the head uses).
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
  StepProgram p_;
  // Memory, tensor by tensor (planner/memory_model.h), the memory model's
  // calls recorded once each and stamped (planner/program_tensors.h).
  ActivationShape shape_;
  ProgramTensors tensors_;
  struct Recording {
    MemoryCall call;
    std::vector<bool> present;  // which inputs were not -1
    MemoryTemplate events;
  };
  std::vector<Recording> recordings_;
  // Per unit: its forward's tensors, flattened, from its forward to its
  // backward in the same micro-batch (each micro-batch's forward and
  // backward are built before the next's).
  std::vector<std::vector<int>> saved_;
  int flowing_ = -1;                // the gradient passed down, during a backward
  std::vector<int> call_inputs_, call_result_;  // scratch for CallMemoryModel's arguments
  std::vector<int> gathered_;       // per unit: its gathered compute buffer (-1: released)
  std::vector<int> compute_grad_;   // per unit: its unsharded compute-dtype gradient (-1: released)
  std::vector<int> reduce_input_;   // per unit: its gradient cast for the reduce-scatter
  // Rate limiter for gathered units (FSDP's limit on all-gathers in flight):
  // at most prefetch_depth + 1 released-after-use units gathered at once — a
  // gather waits for the release of the one that many gathers back, and for
  // the last release of the same unit (its buffer is reused). Units kept from
  // forward to backward (the head, a tied embedding, every unit under
  // shard_grad_op) take no place in it: counting them stopped prefetching (a
  // kept head made the next block's gather wait for the previous block's
  // release: measured 0.27-0.5 ms exposed per block on 2 x H200).
  std::deque<int> in_flight_;         // gathers (op ids) of units gathered for one use, oldest first
  std::vector<int> release_of_;       // gather op id -> the release that ends its use (-1: none yet)
  std::vector<int> current_gather_;   // per unit: its gather in use (-1: none)
  std::vector<int> last_release_of_unit_;
  std::vector<int> last_forward_, gather_fwd_;
  std::vector<int> grad_final_;  // per unit: the op after which its fp32 gradient is final
  // Per unit: its final local reduction also sums the gradient's squares
  // (the GPU's widening kernel, FlatUnit::AccumulateIntoGrad), so the grad
  // norm op does not read that gradient again.
  std::vector<bool> squares_in_reduction_;
  std::vector<int> update_ready_;  // per unit: the op its first forward's parameters wait for (-1: none);
                                   // delayed update: its parameters' copy up (the slot it frees)
  std::vector<int> grad_down_;     // per unit: its gradient's copy to its host staging slot (offload optimizer)
  // Reduce-scatters in issue order. A backward waits for the reduce-scatter two
  // before it (FSDP2's post-backward waits on the previous one's event), so
  // unsharded gradients cannot pile up when the reduction is slower than compute.
  std::vector<int> reduce_scatters_;
  struct PendingShard {
    int rs = -1;  // the reduce-scatter
    int unit = -1, mb = -1;
    std::array<int, 2> temporaries;  // its input and output, freed when accumulated
    bool last_mb = false;
  };
  // Reduce-scatters in issue order; those from pending_head_ on are not yet accumulated.
  std::vector<PendingShard> pending_shards_;
  size_t pending_head_ = 0;
  int last_loss_ = -1;  // the last head forward (the step's loss is complete after it)
  int clip_ = -1;       // the clipping op: every optimizer update waits for it
};

// Puts a logically ordered program into issue order: each all-gather (and the
// host->device copy feeding it) moves up to just after the last of its deps
// and of the gathers before it, so it is issued ahead of the compute it
// overlaps; ids are renumbered; then every collective and copy gains a dep on
// the last compute op issued before it (rule 5 of step_program.h).
void ToIssueOrder(StepProgram& program);

}  // namespace llmplan
