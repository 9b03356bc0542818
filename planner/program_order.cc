// ToIssueOrder: from the builder's logical order (forward unit by unit, then
// backward, then the step's end) to the order the host issues ops in (see
// program_builder.h).
//
// Why hoist: a collective's stream waits for the compute work issued before
// it (rule 5 of step_program.h). Left at its logical place, "all-gather unit
// u+1" comes after "forward unit u" and could not start before that forward
// ends: every gather would be exposed. Moved up to just after its last dep
// (the release that frees a buffer for it), it is issued before the forward
// it should overlap, on the simulator's virtual streams and on the GPU alike.
#include <algorithm>
#include <deque>
#include <stdexcept>

#include "planner/program_builder.h"

namespace llmplan {

namespace {

// Ops issued ahead of their logical place: parameter gathers and the
// host->device copies that feed them (parameter offload).
bool Hoistable(const StepOp& op) {
  return op.kind == OpKind::kAllGather || op.kind == OpKind::kCopyParamsForGather;
}

bool WaitsForCompute(StreamKind s) {
  return s == StreamKind::kGather || s == StreamKind::kReduce || s == StreamKind::kHostToDevice ||
         s == StreamKind::kDeviceToHost;
}

}  // namespace

void ToIssueOrder(StepProgram& program) {
  std::vector<StepOp>& ops = program.ops;
  const size_t n = ops.size();
  std::vector<char> emitted(n, 0);
  std::vector<int> order;
  order.reserve(n);
  std::deque<int> hoisted;  // in logical order: their own stream keeps that order
  for (const StepOp& op : ops)
    if (Hoistable(op)) hoisted.push_back(op.id);
  auto emit = [&](int id) {
    emitted[id] = 1;
    order.push_back(id);
  };
  auto drain = [&] {
    while (!hoisted.empty()) {
      const StepOp& next = ops[hoisted.front()];
      if (!std::all_of(next.deps.begin(), next.deps.end(), [&](int d) { return emitted[d] != 0; })) return;
      emit(next.id);
      hoisted.pop_front();
    }
  };
  drain();
  for (const StepOp& op : ops) {
    if (Hoistable(op)) continue;
    emit(op.id);
    drain();
  }
  // Every hoisted op's deps come before it logically, so all were placed.
  if (order.size() != n) throw std::logic_error("step program: an all-gather waits on an op issued after it");
  std::vector<int> new_id(n, -1);
  for (size_t i = 0; i < order.size(); ++i) new_id[order[i]] = static_cast<int>(i);
  // Into issue order in place, cycle by cycle of the permutation: a second
  // array of ops would be 1.4 MB per 70B program, fresh pages every time.
  std::vector<char> placed(n, 0);
  for (size_t start = 0; start < n; ++start) {
    if (placed[start]) continue;
    placed[start] = 1;
    if (static_cast<size_t>(order[start]) == start) continue;
    StepOp held = std::move(ops[start]);
    for (size_t to = start;;) {
      const size_t from = static_cast<size_t>(order[to]);
      placed[to] = 1;
      if (from == start) {
        ops[to] = std::move(held);
        break;
      }
      ops[to] = std::move(ops[from]);
      to = from;
    }
  }
  int last_compute = -1;
  for (StepOp& op : ops) {
    op.id = new_id[op.id];
    // Renumbered deps are usually still in increasing order: sorted (and
    // duplicates dropped) only when not, which is most of the work saved.
    bool increasing = true, has_last_compute = false;
    for (size_t k = 0; k < op.deps.size(); ++k) {
      int& d = op.deps[k];
      d = new_id[d];
      increasing &= k == 0 || d > op.deps[k - 1];
      has_last_compute |= d == last_compute;
    }
    if (WaitsForCompute(op.stream) && last_compute >= 0 && !has_last_compute) {
      increasing &= op.deps.empty() || last_compute > op.deps.back();
      op.deps.push_back(last_compute);
    }
    if (!increasing) {
      std::sort(op.deps.begin(), op.deps.end());
      op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
    }
    if (op.stream == StreamKind::kCompute) last_compute = op.id;
  }
}

}  // namespace llmplan
