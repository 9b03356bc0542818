// Helpers for GPU tests (label gpu).
//
// RemoveTree exists because the CUDA LibTorch wheel (2.11) exports its own
// std::filesystem symbols; a test binary linked against it resolved
// std::filesystem::remove_all to libtorch.so's copy, which crashed with a call
// through a null pointer (seen on the H200 machine, 2026-11-29, cuda-gdb
// backtrace). nftw + remove from libc has no such clash.
#pragma once

#include <ftw.h>

#include <cstdio>
#include <string>

namespace llmplan::gpu_test {

inline void RemoveTree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) { return std::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

}  // namespace llmplan::gpu_test
