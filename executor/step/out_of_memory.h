// Out of memory in a step: the one line a user gets when an op of the step
// program cannot allocate (the CUDA caching allocator, or the CPU allocator on
// a CPU run), in place of LibTorch's 30-frame backtrace. It names the op, says
// what the allocator held when it failed and what the plan predicted (the
// planner's memory model replayed over the same program), and how to plan
// again one step further from the edge (planner/replan_advice.h, handed in).
//
// Also a fault-injection hook for tests: LLMPLAN_TEST_OOM_AT="RANK:OP" makes
// rank RANK allocate an impossible tensor (1 PiB) on its device just before
// op OP of every step, so the real allocator's error takes the real path.
#pragma once

#include <string>

#include <c10/core/Device.h>

#include "planner/step_program.h"
#include "base/user_error.h"

namespace llmplan::executor {

// What the allocator held when the op failed.
struct MemoryAtFailure {
  int64_t allocated = 0;  // bytes in tensors
  int64_t reserved = 0;   // bytes the allocator held from the device
};

// The failure, as UserError (exit status 2: the plan does not fit this
// machine, the user's to change), e.g.
//   rank 1: out of memory on cuda:1 in op 412 "forward block 30 mb 1": 139.2 GiB
//   allocated, 139.9 GiB reserved when it failed; the plan predicts a peak of 131.0
//   GiB allocated (129.7 GiB after this op); plan again with the same pins and a
//   smaller micro-batch: llmplan estimate --model llama3-8b ... --micro-batch 1
// (one line; `advice` is its end, after "; ", left out when empty).
// REQUIRES: op is one of program's ops.
UserError OutOfMemoryError(const StepProgram& program, const StepOp& op, int rank, const at::Device& device,
                           const MemoryAtFailure& memory, const std::string& advice);

// The test hook (see above): allocates 1 PiB on `device` when
// LLMPLAN_TEST_OOM_AT names this rank and op; else does nothing.
void MaybeInjectOutOfMemory(int rank, int op_id, const at::Device& device);

}  // namespace llmplan::executor
