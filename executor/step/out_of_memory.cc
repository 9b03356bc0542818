// Out of memory in a step (see out_of_memory.h).
#include "executor/step/out_of_memory.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>

#include "base/format.h"
#include "planner/memory_timeline.h"

namespace llmplan::executor {

UserError OutOfMemoryError(const StepProgram& program, const StepOp& op, int rank, const at::Device& device,
                           const MemoryAtFailure& memory, const std::string& advice) {
  const MemoryTimeline predicted = ReplayMemory(program);
  const double at_op = op.id < static_cast<int>(predicted.after_op.size()) ? predicted.after_op[op.id] : 0;
  return UserError("rank " + std::to_string(rank) + ": out of memory on " + device.str() + " in op " +
                   std::to_string(op.id) + " \"" + op.name + "\": " + FormatBytes(static_cast<double>(memory.allocated)) +
                   " allocated, " + FormatBytes(static_cast<double>(memory.reserved)) +
                   " reserved when it failed; the plan predicts a peak of " + FormatBytes(predicted.peak) +
                   " allocated (" + FormatBytes(at_op) + " after this op)" + (advice.empty() ? "" : "; " + advice));
}

void MaybeInjectOutOfMemory(int rank, int op_id, const at::Device& device) {
  static const std::pair<int, int> target = [] {
    const char* text = std::getenv("LLMPLAN_TEST_OOM_AT");
    int r = -1, o = -1;
    if (text == nullptr || std::sscanf(text, "%d:%d", &r, &o) != 2) return std::pair<int, int>{-1, -1};
    return std::pair<int, int>{r, o};
  }();
  if (target.first != rank || target.second != op_id) return;
  // 1 PiB: more than any machine has, so the allocator itself refuses it.
  at::Tensor impossible = at::empty({int64_t{1} << 50}, at::TensorOptions().dtype(at::kByte).device(device));
}

}  // namespace llmplan::executor
