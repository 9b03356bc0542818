// RePlanAdvice: what a run that does not fit tells the user to do next — an
// `llmplan estimate` command with the plan's pins and the one change that
// lowers memory most directly. The out-of-memory message of a step and the
// host-memory preflight of `llmplan run` end with it.
#pragma once

#include <string>

#include "planner/plan.h"

namespace llmplan {

// The embedding and head sharded like the blocks; else, for a GPU's memory
// (`gpu_memory`), each gather casting its shard instead of a kept bf16 copy;
// else half the micro-batch; else every block checkpointed; else the
// optimizer offloaded; else more GPUs. REQUIRES: plan.Validate() passes.
std::string RePlanAdvice(const Plan& plan, bool gpu_memory);

}  // namespace llmplan
