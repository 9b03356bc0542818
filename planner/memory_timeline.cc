#include "planner/memory_timeline.h"

namespace llmplan {

double AllocatorPersistentBytes(const PersistentMemory& pm) {
  return pm.param_shards + pm.grad_shards + pm.optimizer_state + pm.compute_params + pm.workspaces + pm.graph_workspaces + pm.step_inputs;
}

MemoryTimeline ReplayMemory(const StepProgram& program) {
  MemoryTimeline t;
  t.persistent = AllocatorPersistentBytes(program.persistent);
  t.peak = t.persistent;
  const size_t n = program.ops.size();
  t.after_op.resize(n);
  t.peak_in_op.resize(n);
  std::array<double, kNumMemoryCategories> current{};
  double transient = 0;
  for (const StepOp& op : program.ops) {
    double highest = t.persistent + transient;
    auto apply = [&](const std::vector<MemoryDelta>& deltas) {
      for (const MemoryDelta& d : deltas) {
        current[static_cast<int>(d.category)] += d.bytes;
        transient += d.bytes;
        if (t.persistent + transient > highest) highest = t.persistent + transient;
        if (t.persistent + transient > t.peak) {
          t.peak = t.persistent + transient;
          t.peak_op = op.id;
          t.at_peak = current;
        }
      }
    };
    apply(op.alloc_at_start);
    apply(op.free_at_end);
    t.after_op[op.id] = t.persistent + transient;
    t.peak_in_op[op.id] = highest;
  }
  return t;
}

}  // namespace llmplan
