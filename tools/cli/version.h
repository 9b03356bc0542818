// VersionText: what `llmplan --version` prints. It comes from values CMake
// wrote at configure time (tools/cli/build_info.h.in), so the planner binary
// can say which LibTorch, CUDA and NCCL its executor was built with without
// loading any of them.
#pragma once

#include <string>

#include "feedback/calibration_store.h"

namespace llmplan::cli {

// For example
//   llmplan 0.1.0 (git 683f6c7e1a2b)
//   executor: LibTorch 2.9.1, CUDA 13.0.88, NCCL 2.28.9
// "executor: not built" when configured without LibTorch, and
// "CPU only" in place of CUDA and NCCL for an executor built without CUDA.
std::string VersionText();

// The versions a measurement depends on (the calibration store's key).
BuildVersions ThisBuild();

}  // namespace llmplan::cli
