// RunDoctor: `llmplan doctor` — what a user must know before training on this
// machine, each line judged by measurement: the GPUs (name, memory, compute
// capability), driver and CUDA runtime, the NCCL loaded against the one built
// against, LibTorch; every GPU pair's peer access and measured copy bandwidth
// (NVLink, PCIe or through the host); a health all-reduce on all local GPUs
// (correct sums, bus bandwidth against the links); the NCCL_* and CUDA_*
// variables set; host memory and cores. Without a GPU, every GPU check says
// so on one line and is skipped (CPU-only use is legitimate).
#pragma once

#include <vector>

#include "executor/doctor/finding.h"

namespace llmplan::executor {

// `environment`: an environ-style array, judged as it is before the doctor
// sets NCCL_NVLS_ENABLE=0 for its own all-reduce. Never throws for what it
// finds: a failed measurement is a problem finding.
std::vector<Finding> RunDoctor(char** environment);

}  // namespace llmplan::executor
