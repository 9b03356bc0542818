// What ProgramBuilder's phases hand each other (planner/program_builder.h),
// grouped by what it tracks: the gathered parameters and their rate limiter,
// each unit's forward results until its backward, each unit's gradient until
// its final reduction, and the offloaded optimizer's chain of host updates.
// Values are op ids or tensor ids of the program being built; -1 is none.
// Private to the builder.
#pragma once

#include <array>
#include <cstddef>
#include <deque>
#include <vector>

namespace llmplan {

// Units whose parameters are gathered, and FSDP's limit on all-gathers in
// flight: at most prefetch_depth + 1 released-after-use units gathered at
// once. A gather waits for the release of the one that many gathers back,
// and for the last release of the same unit (its buffer is reused). Units
// kept from forward to backward (the head, a tied embedding, every unit under
// shard_grad_op) take no place in it: counted, they would stop prefetching (a
// kept head makes the next block's gather wait for the previous block's
// release: measured 0.27-0.5 ms exposed per block on 2 x H200).
class GatheredUnits {
 public:
  explicit GatheredUnits(int units)
      : buffer_(units, -1), current_gather_(units, -1), last_release_of_unit_(units, -1) {}

  // Appends to `deps` what a new gather of unit u waits for. `kept`: the
  // gathered copy stays until the backward (it takes no place in the limit).
  void AddWaits(int u, bool kept, int prefetch_depth, std::vector<int>& deps) {
    if (!kept && in_flight_.size() > static_cast<size_t>(prefetch_depth)) {
      deps.push_back(release_of_[in_flight_.front()]);  // its use comes earlier, so its release exists
      in_flight_.pop_front();
    }
    deps.push_back(last_release_of_unit_[u]);
  }
  // Op `gather` has gathered unit u into tensor `buffer`.
  void Gathered(int u, int gather, int buffer, bool kept) {
    buffer_[u] = buffer;
    current_gather_[u] = gather;
    if (release_of_.size() <= static_cast<size_t>(gather)) release_of_.resize(static_cast<size_t>(gather) + 1, -1);
    if (!kept) in_flight_.push_back(gather);
  }
  // The tensor holding unit u's gathered parameters.
  int Buffer(int u) const { return buffer_[u]; }
  // Op `release` ends the use of unit u's current gather and frees its buffer.
  void Released(int u, int release) {
    buffer_[u] = -1;
    last_release_of_unit_[u] = release;
    release_of_[current_gather_[u]] = release;
    current_gather_[u] = -1;
  }

 private:
  std::vector<int> buffer_;             // per unit: its gathered compute-dtype buffer
  std::deque<int> in_flight_;           // gathers of units gathered for one use, oldest first
  std::vector<int> release_of_;         // gather op id -> the release that ends its use
  std::vector<int> current_gather_;     // per unit: its gather in use
  std::vector<int> last_release_of_unit_;
};

// What each unit's forward leaves for its backward in the same micro-batch
// (each micro-batch's forward and backward are built before the next's).
struct ForwardResults {
  explicit ForwardResults(int units) : saved(units), forward(units, -1), gather(units, -1) {}
  // Per unit: its forward's tensors, flattened (a SavedTensors as its saved
  // ids then its output), replaced by the recompute's for a checkpointed block.
  std::vector<std::vector<int>> saved;
  std::vector<int> forward;  // per unit: its forward op
  std::vector<int> gather;   // per unit: its forward's gather (the backward's too, where kept)
  int loss = -1;             // the head's forward: the step's loss is complete after the last one
};

// A reduce-scatter whose shard is not yet accumulated into the fp32 gradient.
struct PendingShard {
  int rs = -1;  // the reduce-scatter
  int unit = -1, mb = -1;
  std::array<int, 2> temporaries;  // its input and output, freed when accumulated
  bool last_mb = false;
};

// Each unit's gradient from the backward that makes it to its final
// reduction, and the reductions in flight.
struct GradientState {
  explicit GradientState(int units)
      : compute(units, -1), reduce_input(units, -1), final_op(units, -1), squares_summed(units, false) {}
  std::vector<int> compute;       // per unit: its unsharded compute-dtype gradient (tensor)
  std::vector<int> reduce_input;  // per unit: that gradient cast for its reduce-scatter (tensor)
  // Reduce-scatters in issue order. A backward waits for the one two before
  // it (FSDP2's post-backward waits on the previous one's event), so
  // unsharded gradients cannot pile up when the reduction is slower than
  // compute.
  std::vector<int> reduce_scatters;
  // Reduce-scatters in issue order; those from pending_head on are not yet accumulated.
  std::vector<PendingShard> pending;
  size_t pending_head = 0;
  std::vector<int> final_op;  // per unit: the op after which its fp32 gradient is final
  // Per unit: its final local reduction also sums the gradient's squares
  // (the GPU's widening kernel, FlatUnit::AccumulateIntoGrad), so the grad
  // norm op does not read that gradient again.
  std::vector<bool> squares_summed;
};

// The offloaded optimizer's ops (Plan::offload) that the forward, backward
// and reductions chain to one another.
struct HostUpdates {
  explicit HostUpdates(int units) : params_ready(units, -1), grad_down(units, -1) {}
  // Per unit: the op its first forward's parameters wait for (the update or
  // its copy up); delayed update: its parameters' copy up (the slot it frees).
  std::vector<int> params_ready;
  std::vector<int> grad_down;  // per unit: its gradient's copy to its host staging
};

}  // namespace llmplan
