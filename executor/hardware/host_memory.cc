#include "executor/hardware/host_memory.h"

#include <atomic>
#include <string>

#ifdef LLMPLAN_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "base/format.h"  // FormatBytes
#include "base/user_error.h"

namespace llmplan::executor {

namespace {

std::atomic<int64_t> pinned_now{0};
std::atomic<int64_t> pinned_peak{0};

[[maybe_unused]] void CountPinned(int64_t delta) {
  const int64_t now = pinned_now.fetch_add(delta) + delta;
  int64_t peak = pinned_peak.load();
  while (now > peak && !pinned_peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

at::Tensor PinnedHostZeros(int64_t numel, at::ScalarType dtype) {
  TORCH_CHECK(numel >= 0, "PinnedHostZeros: negative size ", numel);
#ifdef LLMPLAN_WITH_CUDA
  int devices = 0;
  if (numel > 0 && cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
    void* ptr = nullptr;
    // Portable: a DMA from any device's stream may use it.
    const cudaError_t err = cudaHostAlloc(&ptr, static_cast<size_t>(bytes), cudaHostAllocPortable);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // reset it: a later CUDA call must not report this failure as its own
      throw UserError("cannot pin " + FormatBytes(static_cast<double>(bytes)) + " of host memory (" +
                      FormatBytes(static_cast<double>(PinnedHostBytes())) + " pinned already): " +
                      cudaGetErrorString(err) + "; offload less, use more GPUs, or check the node's memory against "
                      "the plan's host figure (llmplan estimate --host-memory)");
    }
    CountPinned(bytes);
    at::Tensor t = at::from_blob(
        ptr, {numel},
        [bytes](void* p) {
          cudaFreeHost(p);
          CountPinned(-bytes);
        },
        at::TensorOptions().dtype(dtype).device(at::kCPU));
    t.zero_();  // parallel over the host's cores
    return t;
  }
#endif
  return at::zeros({numel}, at::TensorOptions().dtype(dtype).device(at::kCPU));
}

int64_t PinnedHostBytes() { return pinned_now.load(); }
int64_t PeakPinnedHostBytes() { return pinned_peak.load(); }

}  // namespace llmplan::executor
