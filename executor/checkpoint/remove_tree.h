// RemoveTree: rm -rf for the executor's own directories (stale partial
// checkpoints, pruned old ones).
//
// Not std::filesystem::remove_all: the CUDA LibTorch wheel (2.11) exports its
// own std::filesystem symbols, and a binary linked against it resolved
// remove_all to libtorch.so's copy, which crashed with a call through a null
// pointer (seen on the H200 machine, 2026-11-29 and again 2026-12-01 when
// pruning a checkpoint). nftw + remove from libc has no such clash.
#pragma once

#include <string>

namespace llmplan::executor {

// Removes `path` and everything under it, not following symbolic links;
// a missing path is not an error. Returns false when something could not be
// removed.
bool RemoveTree(const std::string& path);

}  // namespace llmplan::executor
