// The parts of cuda_machine.h that need no CUDA: version strings, the
// driver's release, the NVLink multicast switches.
#include "executor/hardware/cuda_machine.h"

#include <cstdlib>
#include <cctype>
#include <fstream>
#include <sstream>

namespace llmplan::executor {

std::string CudaVersionString(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string NcclVersionString(int code) {
  if (code <= 0) return "";
  if (code >= 20900) return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." +
                            std::to_string(code % 100);
  return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 100) + "." + std::to_string(code % 100);
}

std::string NvidiaDriverRelease() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  return DriverReleaseFromVersionLine(line);
}

std::string DriverReleaseFromVersionLine(const std::string& line) {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."
  // or, for the open kernel modules, "... Open Kernel Module for x86_64
  // 580.65.06 Release Build ...": the release is the first word made of
  // digits and dots with at least one dot.
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    const bool digits_and_dots = word.find_first_not_of("0123456789.") == std::string::npos;
    if (digits_and_dots && word.find('.') != std::string::npos && std::isdigit(static_cast<unsigned char>(word[0])))
      return word;
  }
  return "";
}

void KeepNvlinkMulticastOff() {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
}

}  // namespace llmplan::executor
