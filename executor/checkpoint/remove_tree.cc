#include "executor/checkpoint/remove_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

namespace llmplan::executor {

bool RemoveTree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  // Depth first (FTW_DEPTH: a directory after its contents), links not followed (FTW_PHYS).
  return ::nftw(
             path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return std::remove(p); }, 16,
             FTW_DEPTH | FTW_PHYS) == 0;
}

}  // namespace llmplan::executor
