#include "simulator/reserved_memory.h"

#include <algorithm>

#include "planner/allocator_model.h"

namespace llmplan {

namespace {

// Every tensor is allocated on the compute stream (the current stream).
constexpr int kComputeStream = 0;
// Two steps: most segments are made in the first, a few in the second (see
// the header); a third step added none on any of the 27 recorded runs.
constexpr int kSteps = 2;

class Replay {
 public:
  Replay(const Plan& plan, const StepProgram& program, double capacity)
      : plan_(plan), program_(program), model_(CachingAllocatorModel::Options{capacity}) {}

  ReservedMemory Run() {
    StartUp();
    ReservedMemory r;
    for (int step = 0; step < kSteps && !Refused(); ++step)
      Step(step == 0, step == kSteps - 1 ? &r.reserved_after : nullptr);
    r.peak_reserved = model_.peak_reserved_bytes();
    r.peak_allocated = model_.peak_allocated_bytes();
    r.segments = model_.num_segments();
    r.retries = model_.num_alloc_retries();
    r.out_of_memory = model_.out_of_memory();
    return r;
  }

 private:
  // A retry (the allocator freeing its cache) or running out refuses the plan.
  bool Refused() const { return model_.num_alloc_retries() > 0 || model_.out_of_memory(); }
  int64_t Alloc(double bytes) { return bytes > 0 ? model_.Malloc(bytes, kComputeStream) : -1; }
  void Free(int64_t handle) {
    if (handle >= 0) model_.Free(handle);
  }

  // What the executor allocates before the first step, in its order
  // (executor/sharding/shard_model.cc, flat_unit.cc, optimizer/adamw.cc,
  // step_interpreter.cc), each unit's share of the program's persistent
  // terms (which say what offload keeps on the host).
  void StartUp() {
    const PersistentMemory& pm = program_.persistent;
    const double c = DTypeBytes(plan_.param_dtype);
    const bool sharded = plan_.shard_group_size > 1;
    const bool resident = plan_.strategy == ShardingStrategy::kNoShard;
    double total = 0;
    for (const Unit& u : program_.units) total += static_cast<double>(u.padded_params);
    if (plan_.gpus > 1) {  // the health check's small tensors: the first small segment
      Free(Alloc(8));
      Free(Alloc(12));
    }
    for (const Unit& u : program_.units) {
      const double padded = static_cast<double>(u.padded_params), share = padded / total;
      Alloc(pm.param_shards * share);  // master
      Alloc(pm.grad_shards * share);   // grad
      const int64_t compute = Alloc(c * padded);
      const int64_t compute_grad = Alloc(c * padded);
      if (!resident) Alloc(pm.compute_params * share);  // compute_shard (resident: compute itself)
      Free(compute_grad);
      // Released at once when sharded. On one GPU with gathers (casts) it
      // stays materialised into the first step: that step's first gather of
      // the unit finds it there, and its release frees it.
      if (sharded) {
        Free(compute);
        materialized_.push_back(-1);
      } else {
        materialized_.push_back(resident ? -1 : compute);
      }
    }
    for (const Unit& u : program_.units) {
      const double share = static_cast<double>(u.padded_params) / total;
      Alloc(pm.optimizer_state * share / 2);  // AdamW m
      Alloc(pm.optimizer_state * share / 2);  // AdamW v
    }
    Alloc(4);  // AdamW's step counter
    const double rope = static_cast<double>(plan_.seq_len * plan_.model.head_dim) * c;
    Alloc(rope);  // cos
    Alloc(rope);  // sin
  }

  void Step(bool first, std::vector<double>* reserved_after) {
    std::vector<int64_t> tokens;
    for (int64_t mb = 0; mb < plan_.grad_accum; ++mb)
      tokens.push_back(Alloc(static_cast<double>(plan_.micro_batch * (plan_.seq_len + 1)) * 8));
    const int64_t loss = Alloc(4);
    handle_.assign(handle_.size(), -1);  // tensor id -> allocator handle (grows as ids are met)
    live_ = 0;
    bool workspaces = !first;
    if (reserved_after != nullptr) reserved_after->assign(program_.ops.size(), 0);
    // Micro-batches repeat one pattern: from the second on, the allocator
    // starts each in the state the one before left, so those between the
    // second and the last make no new segments. They are skipped but for
    // their frees of what the kept ones allocated (a reduce-scatter's
    // temporaries straddle micro-batches); once none of those is live, a
    // skipped op is not even read. It saves most of the replay when the
    // step accumulates many.
    auto repeats = [&](const StepOp& op) {
      return op.micro_batch >= 2 && op.micro_batch < plan_.grad_accum - 1;
    };
    for (const StepOp& op : program_.ops) {
      if (Refused()) break;  // the plan is out: the rest would only cost the search time
      const bool skipped = repeats(op);
      if (!workspaces && op.kind == OpKind::kForward && op.work.gemm_flops > 0) {
        // cuBLAS and cuBLASLt take their workspaces at the first GEMM and keep them.
        Alloc(program_.persistent.workspaces / 2);
        Alloc(program_.persistent.workspaces / 2);
        workspaces = true;
      }
      if (skipped && live_ == 0) {  // nothing it frees was allocated
        if (reserved_after != nullptr) (*reserved_after)[op.id] = model_.reserved_bytes();
        continue;
      }
      auto apply = [&](const std::vector<MemoryDelta>& deltas) {
        for (const MemoryDelta& d : deltas) {
          if (d.tensor < 0) continue;  // parameter offload's staging: not run by the executor
          if (d.bytes > 0) {
            if (skipped) continue;
            // A buffer still materialised from start-up is what the first gather finds.
            int64_t& kept = op.kind == OpKind::kAllGather ? materialized_.at(op.unit) : no_handle_;
            if (d.tensor >= static_cast<int>(handle_.size())) handle_.resize(d.tensor + 1, -1);
            handle_[d.tensor] = kept >= 0 ? kept : Alloc(d.bytes);
            live_ += handle_[d.tensor] >= 0;
            kept = -1;
            continue;
          }
          // Nothing to do for a tensor a skipped op would have made.
          if (d.tensor >= static_cast<int>(handle_.size()) || handle_[d.tensor] < 0) continue;
          Free(handle_[d.tensor]);
          handle_[d.tensor] = -1;
          --live_;
        }
      };
      apply(op.alloc_at_start);
      apply(op.free_at_end);
      if (reserved_after != nullptr) (*reserved_after)[op.id] = model_.reserved_bytes();
    }
    Free(loss);
    for (int64_t h : tokens) Free(h);
  }

  const Plan& plan_;
  const StepProgram& program_;
  CachingAllocatorModel model_;
  std::vector<int64_t> materialized_;  // per unit: a compute buffer still held from start-up (-1: none)
  std::vector<int64_t> handle_;        // tensor id -> the allocator's handle (-1: not allocated)
  int live_ = 0;                       // entries of handle_ that are not -1
  int64_t no_handle_ = -1;
};

}  // namespace

ReservedMemory ReplayAllocator(const Plan& plan, const StepProgram& program, double capacity_bytes) {
  return Replay(plan, program, capacity_bytes).Run();
}

}  // namespace llmplan
