// JudgeEnvironment: the environment variables that change how NCCL, CUDA and
// LibTorch's allocator behave, each with what it does and a verdict on this
// machine — e.g. NCCL_P2P_DISABLE=1 between NVLink-connected GPUs sends every
// collective through host memory (a problem); NCCL_NVLS_ENABLE unset on
// NVLink GPUs leaves NVLink multicast to other programs (a warning).
// Pure: the variables and the machine's measured facts are arguments.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "executor/doctor/finding.h"

namespace llmplan::executor {

// What the verdicts depend on, measured by the doctor's other checks.
struct EnvironmentFacts {
  int gpus = 0;                 // visible CUDA GPUs
  bool nvlink = false;          // some GPU pair measured at NVLink-class bandwidth
  bool all_pairs_peer = true;   // every GPU pair has CUDA peer access (NCCL's P2P transport)
};

// NCCL_*, CUDA_* and the other variables JudgeEnvironment knows
// (PYTORCH_CUDA_ALLOC_CONF, TORCH_SYMM_MEM_DISABLE_MULTICAST,
// NVSHMEM_DISABLE_NVLS) from an environ-style array.
std::map<std::string, std::string> RelevantEnvironment(char** environment);

// One finding per variable set, plus one per variable whose absence matters
// here (NVLink multicast switches on NVLink GPUs), in name order.
std::vector<Finding> JudgeEnvironment(const std::map<std::string, std::string>& variables, const EnvironmentFacts& facts);

}  // namespace llmplan::executor
