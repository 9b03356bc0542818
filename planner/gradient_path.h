// Where a step's final gradient lives when AdamW reads it: the one rule the
// planner (its memory and its ops' bytes) and the executor (which buffers it
// allocates, what its reductions do) both follow.
//
// Normally each unit's gradient is widened into an fp32 shard: micro-batches
// add up there, reduce-scatters land there, offloaded optimizers copy it down
// from there. On one GPU with one micro-batch per step and the optimizer on
// the device, nothing adds up: the bf16 gradient autograd wrote is already
// the final one. AdamW then reads it in bf16 (widening is exact: the update is
// the same bit for bit) and the model keeps no fp32 gradient — 4 bytes a
// parameter (6 GB for Llama-3.2-1B), and the widening pass over it (read 2,
// write 4 bytes a parameter: 3.4 ms of a 255 ms step on an H200) becomes a
// pass that only reads the bf16 gradient for the clip's norm.
#pragma once

#include "planner/plan.h"

namespace llmplan {

// True when AdamW reads each unit's bf16 gradient directly (see above).
// `gpu`: the plan runs on a GPU (the fused AdamW and the norm kernel are
// CUDA's; a CPU run keeps the fp32 path).
inline bool OptimizerReadsComputeGradient(const Plan& plan, bool gpu) {
  return gpu && plan.gpus == 1 && plan.grad_accum == 1 && plan.param_dtype == DType::kBF16 &&
         plan.offload == Offload::kNone && !plan.delayed_update;
}

}  // namespace llmplan
