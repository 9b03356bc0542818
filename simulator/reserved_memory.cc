#include "simulator/reserved_memory.h"

#include <algorithm>
#include <cstddef>

#include "planner/allocator_model.h"

namespace llmplan {

namespace {

// Every tensor is allocated on the compute stream (the current stream).
constexpr int kComputeStream = 0;
// A CUDA graph's private pool: its blocks serve only the capture's own
// allocations, as a stream's serve only that stream's.
constexpr int kGraphPool = 1;
// Two steps: most segments are made in the first, a few in the second (see
// the header); a third step added none on any of the 27 recorded runs.
constexpr int kSteps = 2;
// Ops between two points where the first step's state is kept for the
// second to recognise (a state costs ~1,000 blocks to copy; a replayed
// 70B step is ~5,000 ops).
constexpr size_t kCheckpointOps = 128;
// Owners of allocator blocks that are not the program's tensors.
constexpr int64_t kPersistent = -2;  // start-up buffers, workspaces: held for good
constexpr int64_t kLoss = -3;
constexpr int64_t kTokens = -4;      // micro-batch mb's tokens: kTokens - mb

class Replay {
 public:
  Replay(const Plan& plan, const StepProgram& program, double capacity)
      : plan_(plan), program_(program), model_(CachingAllocatorModel::Options{capacity}) {}

  ReservedMemory Run() {
    StartUp();
    ReservedMemory r;
    if (program_.cuda_graph) {
      GraphSteps(&r.reserved_after);
    } else {
      for (int step = 0; step < kSteps && !Refused(); ++step) Step(step, step == kSteps - 1 ? &r.reserved_after : nullptr);
    }
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
  int64_t Alloc(double bytes, int64_t owner = kPersistent, int stream = kComputeStream) {
    const int64_t handle = bytes > 0 ? model_.Malloc(bytes, stream) : -1;
    if (handle >= 0) {
      if (handle >= static_cast<int64_t>(owner_.size())) owner_.resize(handle + 1, kPersistent);
      owner_[handle] = owner;
    }
    return handle;
  }
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
    // Each unit's share of the persistent terms: its shard's part of all
    // shards (an edge unit kept whole has a larger shard than a block). The
    // compute-dtype shards are shared among the gathered units only: a
    // resident unit's compute copy is its compute buffer.
    double shards = 0, gathered_shards = 0, resident_compute = 0;
    for (const Unit& u : program_.units) {
      const double shard = static_cast<double>(u.padded_params) / u.group_size;
      shards += shard;
      if (u.resident) resident_compute += c * static_cast<double>(u.padded_params);
      else gathered_shards += shard;
    }
    const double compute_shards = pm.compute_params - resident_compute;
    if (plan_.gpus > 1) {  // the health check's small tensors: the first small segment
      Free(Alloc(8));
      Free(Alloc(12));
    }
    for (const Unit& u : program_.units) {
      const double padded = static_cast<double>(u.padded_params), shard = padded / u.group_size;
      const double share = shard / shards;
      Alloc(pm.param_shards * share);  // master
      Alloc(pm.grad_shards * share);   // grad
      const int64_t compute = Alloc(c * padded);
      const int64_t compute_grad = Alloc(c * padded);
      if (!u.resident) Alloc(compute_shards * shard / gathered_shards);  // compute_shard (resident: compute itself)
      // Both released at once unless the unit is resident (shard_model.cc):
      // a gathered unit's compute buffer exists from its gather to its
      // release. (Keeping it into the first step on one GPU, as this replay
      // once did, put 2 bytes per parameter too many in start-up: +19%
      // reserved for Llama-3.2-3B full_shard with the optimizer offloaded,
      // whose AdamW state on the host left no later allocation to fill the
      // holes.)
      Free(compute_grad);
      if (!u.resident) Free(compute);
    }
    for (const Unit& u : program_.units) {
      const double share = static_cast<double>(u.padded_params) / u.group_size / shards;
      Alloc(pm.optimizer_state * share / 2);  // AdamW m
      Alloc(pm.optimizer_state * share / 2);  // AdamW v
    }
    Alloc(4);  // AdamW's step counter
    const double rope = static_cast<double>(plan_.seq_len * plan_.model.head_dim) * c;
    Alloc(rope);  // cos
    Alloc(rope);  // sin
  }

  // The state of the replay where `op` is next: every block the allocator
  // holds, an allocated one's handle replaced by its owner (a tensor id, or
  // one of the codes above), which is the same in both steps.
  struct State {
    size_t op = 0;
    double reserved = 0, allocated = 0;
    bool workspaces = false;
    std::vector<CachingAllocatorModel::BlockInfo> blocks;
    bool operator==(const State&) const = default;
  };
  State Now(size_t op, bool workspaces) const {
    State state{op, model_.reserved_bytes(), model_.allocated_bytes(), workspaces, model_.Blocks()};
    for (auto& b : state.blocks) b.handle = b.allocated ? owner_.at(b.handle) : -1;
    return state;
  }

  void Record(int op, bool first, std::vector<double>* reserved_after) {
    if (first) first_reserved_after_[op] = model_.reserved_bytes();
    if (reserved_after != nullptr) (*reserved_after)[op] = model_.reserved_bytes();
  }

  // Step `step` (0 or 1). The second is the first again from the cache the
  // first left: where it reaches a state the first passed through at the
  // same op, it would repeat the first's rest exactly (the same calls on
  // the same blocks): no new segment, no retry, no new peak, the same
  // reserved bytes after each op. It stops there (the 70B search on 64
  // GPUs: 34 of its 37 second steps, two thirds of the way in on average).
  void Step(int step, std::vector<double>* reserved_after) {
    const bool first = step == 0;
    std::vector<int64_t> tokens;
    for (int64_t mb = 0; mb < plan_.grad_accum; ++mb)
      tokens.push_back(Alloc(static_cast<double>(plan_.micro_batch * (plan_.seq_len + 1)) * 8, kTokens - mb));
    const int64_t loss = Alloc(4, kLoss);
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
    if (first) {
      checkpoints_.clear();
      first_reserved_after_.assign(program_.ops.size(), 0);
    }
    size_t next_checkpoint = 0, replayed = 0;
    for (const StepOp& op : program_.ops) {
      if (Refused()) break;  // the plan is out: the rest would only cost the search time
      const bool skipped = repeats(op);
      const size_t i = static_cast<size_t>(&op - program_.ops.data());
      if (!skipped && replayed++ % kCheckpointOps == 0 && i > 0 && !model_.events_outstanding()) {
        if (first) {
          checkpoints_.push_back(Now(i, workspaces));
        } else {
          while (next_checkpoint < checkpoints_.size() && checkpoints_[next_checkpoint].op < i) ++next_checkpoint;
          const State* seen = next_checkpoint < checkpoints_.size() && checkpoints_[next_checkpoint].op == i
                                  ? &checkpoints_[next_checkpoint] : nullptr;
          // Cheap tests first: most states that differ differ in these.
          if (seen != nullptr && seen->reserved == model_.reserved_bytes() &&
              seen->allocated == model_.allocated_bytes() && *seen == Now(i, workspaces)) {
            if (reserved_after != nullptr)
              std::copy(first_reserved_after_.begin() + i, first_reserved_after_.end(), reserved_after->begin() + i);
            return;
          }
        }
      }
      if (!workspaces && op.kind == OpKind::kForward && op.work.gemm_flops > 0) {
        // cuBLAS and cuBLASLt take their workspaces at the first GEMM and keep them.
        Alloc(program_.persistent.workspaces / 2);
        Alloc(program_.persistent.workspaces / 2);
        workspaces = true;
      }
      if (skipped && live_ == 0) {  // nothing it frees was allocated
        Record(op.id, first, reserved_after);
        continue;
      }
      auto apply = [&](const std::vector<MemoryDelta>& deltas) {
        for (const MemoryDelta& d : deltas) {
          if (d.tensor < 0) continue;  // parameter offload's staging: not run by the executor
          if (d.bytes > 0) {
            if (skipped) continue;
            if (d.tensor >= static_cast<int>(handle_.size())) handle_.resize(d.tensor + 1, -1);
            handle_[d.tensor] = Alloc(d.bytes, d.tensor);
            live_ += handle_[d.tensor] >= 0;
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
      Record(op.id, first, reserved_after);
    }
    Free(loss);
    for (int64_t h : tokens) Free(h);
  }

  // StepProgram::cuda_graph, as the executor runs it: a first step op by op
  // (it warms the libraries up), the cache emptied, then the step whose
  // captured ops allocate in the graph's private pool — cuBLAS's workspaces
  // for the capture's stream too — and a replayed step, whose captured ops
  // allocate nothing. The tokens and the loss are the graph's fixed inputs
  // and output from the capture on; a tensor a captured op makes and a later
  // op frees is kept instead (the next replay writes it again).
  void GraphSteps(std::vector<double>* reserved_after) {
    Step(0, nullptr);
    if (Refused()) return;
    model_.EmptyCache();
    for (int64_t mb = 0; mb < plan_.grad_accum; ++mb) {  // each micro-batch's tokens and targets
      Alloc(static_cast<double>(plan_.micro_batch * (plan_.seq_len + 1)) * 8, kTokens - mb);
      Alloc(static_cast<double>(plan_.micro_batch * plan_.seq_len) * 8, kTokens - mb);
    }
    Alloc(4, kLoss);
    handle_.assign(handle_.size(), -1);
    for (const bool capture : {true, false}) {
      if (reserved_after != nullptr && !capture) reserved_after->assign(program_.ops.size(), 0);
      bool workspaces = !capture;
      for (const StepOp& op : program_.ops) {
        if (Refused()) return;
        if (op.captured && !capture) {  // replayed: nothing allocated or freed
          if (reserved_after != nullptr) (*reserved_after)[op.id] = model_.reserved_bytes();
          continue;
        }
        if (op.captured && !workspaces && op.kind == OpKind::kForward && op.work.gemm_flops > 0) {
          Alloc(program_.persistent.graph_workspaces / 2, kPersistent, kGraphPool);
          Alloc(program_.persistent.graph_workspaces / 2, kPersistent, kGraphPool);
          workspaces = true;
        }
        auto apply = [&](const std::vector<MemoryDelta>& deltas) {
          for (const MemoryDelta& d : deltas) {
            if (d.tensor < 0) continue;
            if (d.tensor >= static_cast<int>(handle_.size())) handle_.resize(d.tensor + 1, -1);
            if (d.tensor >= static_cast<int>(in_graph_.size())) in_graph_.resize(handle_.size(), false);
            if (d.bytes > 0) {
              handle_[d.tensor] = Alloc(d.bytes, d.tensor, op.captured ? kGraphPool : kComputeStream);
              in_graph_[d.tensor] = op.captured;
              continue;
            }
            if (handle_[d.tensor] < 0 || (in_graph_[d.tensor] && !op.captured)) continue;  // kept for the graph
            Free(handle_[d.tensor]);
            handle_[d.tensor] = -1;
          }
        };
        apply(op.alloc_at_start);
        apply(op.free_at_end);
        if (reserved_after != nullptr && !capture) (*reserved_after)[op.id] = model_.reserved_bytes();
      }
    }
  }

  const Plan& plan_;
  const StepProgram& program_;
  std::vector<bool> in_graph_;         // tensor id -> allocated by a captured op
  CachingAllocatorModel model_;
  std::vector<int64_t> handle_;        // tensor id -> the allocator's handle (-1: not allocated)
  int live_ = 0;                       // entries of handle_ that are not -1
  std::vector<int64_t> owner_;         // allocator handle -> what holds it (a tensor id or a code above)
  std::vector<State> checkpoints_;     // the first step's states, by op
  std::vector<double> first_reserved_after_;  // the first step's reserved bytes after each op
};

}  // namespace

ReservedMemory ReplayAllocator(const Plan& plan, const StepProgram& program, double capacity_bytes) {
  return Replay(plan, program, capacity_bytes).Run();
}

}  // namespace llmplan
