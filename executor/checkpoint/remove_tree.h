// RemoveTree: rm -rf for the executor's own directories (stale partial
// checkpoints, pruned old ones).
//
// Not std::filesystem::remove_all: a LibTorch wheel exports its own copies of
// std::filesystem, and a binary that binds to them crashes (CMakeLists.txt
// links libstdc++ first so that ours bind to libstdc++'s; nftw + remove from
// libc does not depend on that).
#pragma once

#include <string>

namespace llmplan::executor {

// Removes `path` and everything under it, not following symbolic links;
// a missing path is not an error. Returns false when something could not be
// removed.
bool RemoveTree(const std::string& path);

}  // namespace llmplan::executor
