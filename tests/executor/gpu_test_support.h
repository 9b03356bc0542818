// Helpers for GPU tests (label gpu).
//
// RemoveTree: see executor/checkpoint/remove_tree.h (std::filesystem::remove_all
// crashes in binaries linked against the CUDA LibTorch wheel).
#pragma once

#include <string>

#include "executor/checkpoint/remove_tree.h"

namespace llmplan::gpu_test {

inline void RemoveTree(const std::string& path) { executor::RemoveTree(path); }

}  // namespace llmplan::gpu_test
