// Checked CUDA runtime and NCCL calls and owners of device buffers, streams
// and events, for the code that measures this machine
// (llmplan profile, llmplan doctor) with the CUDA and NCCL C APIs directly.
//
// Included only by *_cuda.cc files (compiled in CUDA builds): it needs
// cuda_runtime.h and nccl.h and nothing of LibTorch, so those files can be
// checked on a machine without a GPU or a CUDA LibTorch.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>
#include <nccl.h>

namespace llmplan::executor::cuda {

// Throws std::runtime_error("<what>: <call> failed: <CUDA's message>").
inline void Check(cudaError_t status, const std::string& what, const char* call) {
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the next call must not report this failure as its own
    throw std::runtime_error(what + ": " + call + " failed: " + cudaGetErrorString(status));
  }
}

inline void Check(ncclResult_t status, const std::string& what, const char* call) {
  if (status != ncclSuccess) throw std::runtime_error(what + ": " + call + " failed: " + ncclGetErrorString(status));
}

// `bytes` of device memory on `device`, from cudaMalloc (outside LibTorch's
// caching allocator, so a measurement's buffers never linger in its cache).
class DeviceBuffer {
 public:
  DeviceBuffer(int device, size_t bytes) : device_(device) {
    Check(cudaSetDevice(device), "device buffer", "cudaSetDevice");
    Check(cudaMalloc(&ptr_, bytes), "device buffer of " + std::to_string(bytes) + " bytes", "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (ptr_ == nullptr) return;
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(device_);
    cudaFree(ptr_);
    cudaSetDevice(current);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  int device_;
  void* ptr_ = nullptr;
};

// Page-locked host memory: a copy from or to it is one DMA at the link's speed.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes) {
    Check(cudaHostAlloc(&ptr_, bytes, cudaHostAllocPortable), "pinned host buffer of " + std::to_string(bytes) + " bytes",
          "cudaHostAlloc");
  }
  ~PinnedBuffer() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// A non-blocking stream on `device`: it never waits on the legacy default
// stream. `highest_priority`: the device's greatest priority, as the
// executor's NCCL streams have (comm/nccl_communicator.h), so the block
// scheduler starts this stream's blocks ahead of queued compute blocks.
class Stream {
 public:
  explicit Stream(int device, bool highest_priority = false) {
    Check(cudaSetDevice(device), "stream", "cudaSetDevice");
    int least = 0, greatest = 0;
    if (highest_priority)
      Check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream", "cudaDeviceGetStreamPriorityRange");
    Check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest), "stream",
          "cudaStreamCreateWithPriority");
  }
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void Synchronize(const std::string& what) const { Check(cudaStreamSynchronize(stream_), what, "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
};

// A timing event on `device` (recorded only on that device's streams).
class Event {
 public:
  explicit Event(int device) {
    Check(cudaSetDevice(device), "event", "cudaSetDevice");
    Check(cudaEventCreate(&event_), "event", "cudaEventCreate");
  }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void Record(cudaStream_t stream, const std::string& what) { Check(cudaEventRecord(event_, stream), what, "cudaEventRecord"); }
  // Seconds from `start` to this event. REQUIRES: both recorded and complete.
  double SecondsSince(const Event& start, const std::string& what) const {
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start.event_, event_), what, "cudaEventElapsedTime");
    return ms / 1000.0;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace llmplan::executor::cuda
