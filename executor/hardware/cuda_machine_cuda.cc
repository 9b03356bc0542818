// ProbeCudaMachine and DeviceMemory (see cuda_machine.h): CUDA runtime and
// NCCL calls only, so this file compiles without a CUDA LibTorch.
#include "executor/hardware/cuda_machine.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include "executor/hardware/cuda_calls.h"

namespace llmplan::executor {

CudaMachine ProbeCudaMachine() {
  CudaMachine machine;
  machine.driver_release = NvidiaDriverRelease();
  cudaDriverGetVersion(&machine.driver_api_version);  // 0 without a driver; never fails otherwise
  cudaRuntimeGetVersion(&machine.runtime_version);
  machine.nccl_built = NCCL_VERSION_CODE;
  if (ncclGetVersion(&machine.nccl_loaded) != ncclSuccess) machine.nccl_loaded = 0;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    machine.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    return machine;
  }
  if (count == 0) {
    machine.error = "the CUDA runtime sees no device";
    return machine;
  }
  for (int i = 0; i < count; ++i) {
    CudaDevice d;
    d.index = i;
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) != cudaSuccess) {
      (void)cudaGetLastError();
      machine.error = "cudaGetDeviceProperties failed for device " + std::to_string(i);
      machine.devices.clear();
      return machine;
    }
    d.name = props.name;
    d.cc_major = props.major;
    d.cc_minor = props.minor;
    d.multiprocessors = props.multiProcessorCount;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) d.pci_bus_id = bus;
    size_t free = 0, total = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess) {
      d.free_bytes = static_cast<double>(free);
      d.memory_bytes = static_cast<double>(total);
    } else {
      (void)cudaGetLastError();
      d.memory_bytes = static_cast<double>(props.totalGlobalMem);
    }
    machine.devices.push_back(d);
  }
  cudaSetDevice(0);
  return machine;
}

std::pair<double, double> DeviceMemory(int device) {
  int current = 0;
  cuda::Check(cudaGetDevice(&current), "device memory", "cudaGetDevice");
  cuda::Check(cudaSetDevice(device), "device memory", "cudaSetDevice");
  size_t free = 0, total = 0;
  cuda::Check(cudaMemGetInfo(&free, &total), "device memory", "cudaMemGetInfo");
  cudaSetDevice(current);
  return {static_cast<double>(free), static_cast<double>(total)};
}

}  // namespace llmplan::executor
