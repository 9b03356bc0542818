// CudaMachine: the GPUs this process sees and the driver, CUDA runtime and
// NCCL versions it runs with — what `llmplan doctor` judges and `llmplan
// profile` records in a profile's source.
//
// This header needs neither CUDA nor NCCL. The probe (ProbeCudaMachine,
// DeviceMemory) exists only in CUDA builds (cuda_machine_cuda.cc,
// LLMPLAN_WITH_CUDA); the rest everywhere.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace llmplan::executor {

struct CudaDevice {
  int index = 0;
  std::string name;         // "NVIDIA H200"
  double memory_bytes = 0;  // cudaMemGetInfo's total
  double free_bytes = 0;    // free when probed, this process's context already made
  int cc_major = 0, cc_minor = 0;  // compute capability
  int multiprocessors = 0;
  std::string pci_bus_id;   // "0000:19:00.0"
};

struct CudaMachine {
  // Why no GPU can be used ("this build has no CUDA", cudaGetDeviceCount's
  // error); empty when `devices` is what the process sees.
  std::string error;
  std::vector<CudaDevice> devices;
  std::string driver_release;   // the kernel module's release, "580.65.06"; empty without one
  int driver_api_version = 0;   // cudaDriverGetVersion: 13000 is CUDA 13.0
  int runtime_version = 0;      // cudaRuntimeGetVersion
  int nccl_loaded = 0;          // ncclGetVersion of the library loaded: 22809 is 2.28.9
  int nccl_built = 0;           // NCCL_VERSION_CODE of the nccl.h compiled against
};

// "13.0" for 13000 (CUDA's major*1000 + minor*10); "" for 0.
std::string CudaVersionString(int version);
// "2.28.9" for 22809 (NCCL >= 2.9: major*10000 + minor*100 + patch;
// before: major*1000 + minor*100 + patch); "" for 0.
std::string NcclVersionString(int code);
// The NVIDIA kernel module's release from /proc/driver/nvidia/version, "" when
// there is none (no NVIDIA driver loaded). Needs no CUDA.
std::string NvidiaDriverRelease();
// The release in one line of that file (proprietary and open kernel modules
// word it differently), "" when it holds none.
std::string DriverReleaseFromVersionLine(const std::string& line);

// NVLink multicast (NVLS) stays off unless the environment sets it:
// NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
// NVSHMEM_DISABLE_NVLS=1. On the lent GPU machines a program that uses it can
// take the host's shared GPUs out of service, and NVLS buffers take device
// memory the planner does not count. Call before the first NCCL call of the
// process (NCCL reads its environment once).
void KeepNvlinkMulticastOff();

#ifdef LLMPLAN_WITH_CUDA
// Every visible device, the versions, or `error`. Creates the CUDA context
// on every device (cudaMemGetInfo needs one). Never throws.
CudaMachine ProbeCudaMachine();

// {free, total} bytes of `device` now (cudaMemGetInfo).
// REQUIRES: device is visible. Throws std::runtime_error on a CUDA error.
std::pair<double, double> DeviceMemory(int device);
#endif

}  // namespace llmplan::executor
