#include "tools/cli/version.h"

#include "tools/cli/build_info.h"

namespace llmplan::cli {

namespace {

std::string OrUnknown(const char* version) { return version[0] != '\0' ? version : "unknown"; }

std::string ExecutorLine() {
  if (build_info::kTorchVersion[0] == '\0') return "executor: not built (configured without LibTorch)";
  std::string line = std::string("executor: LibTorch ") + build_info::kTorchVersion;
  if (!build_info::kWithCuda) return line + ", CPU only";
  return line + ", CUDA " + OrUnknown(build_info::kCudaVersion) + ", NCCL " + OrUnknown(build_info::kNcclVersion);
}

}  // namespace

std::string VersionText() {
  std::string first = std::string("llmplan ") + build_info::kVersion;
  if (build_info::kGitCommit[0] != '\0') first += std::string(" (git ") + build_info::kGitCommit + ")";
  return first + "\n" + ExecutorLine();
}

BuildVersions ThisBuild() {
  BuildVersions b;
  b.llmplan = build_info::kVersion;
  if (build_info::kGitCommit[0] != '\0') b.llmplan += std::string(" (git ") + build_info::kGitCommit + ")";
  b.torch = build_info::kTorchVersion;
  if (build_info::kWithCuda) {
    b.cuda = OrUnknown(build_info::kCudaVersion);
    b.nccl = OrUnknown(build_info::kNcclVersion);
  }
  return b;
}

}  // namespace llmplan::cli
