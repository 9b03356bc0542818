// MemoryTimeline: the device memory a step program holds, replayed in issue
// order — the order the host issues the ops, which is the order the CUDA
// caching allocator sees their allocations and frees (its books are kept on
// the host when a tensor is created or dropped, whatever the device is doing
// then). So `after_op[i]` is what torch.cuda.memory_allocated() reads right
// after op i is issued, and `peak` is max_memory_allocated() over the step:
// the executor's measurement (executor/step/step_recorder.h) is its twin, op by op.
//
// Within an op, `alloc_at_start` is applied in order, then `free_at_end`; the
// op's highest point comes after the last allocation it makes before a free.
#pragma once

#include <array>
#include <vector>

#include "planner/step_program.h"

namespace llmplan {

struct MemoryTimeline {
  double persistent = 0;         // bytes held for the whole step (states, shards, workspaces)
  std::vector<double> after_op;  // bytes after each op's issue, persistent included; by op id
  std::vector<double> peak_in_op;  // the highest while issuing it
  double peak = 0;               // over the step
  int peak_op = -1;              // the op during whose issue it was reached
  std::array<double, kNumMemoryCategories> at_peak{};  // transient bytes per category then
};

// The bytes in PersistentMemory that the caching allocator holds (not the CUDA
// context or NCCL's buffers, which live outside it).
double AllocatorPersistentBytes(const PersistentMemory& pm);

MemoryTimeline ReplayMemory(const StepProgram& program);

}  // namespace llmplan
