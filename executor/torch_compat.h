// torch_compat: every difference between the LibTorch versions the executor
// builds against (Debian's 1.13 CPU build on dev/CI machines, 2.x + CUDA on the
// GPU machine) lives here, so the rest of the executor is version-free.
//
// Two axes:
//   - LibTorch version (TORCH_VERSION_MAJOR/MINOR): scaled-dot-product
//     attention, fused AdamW, SDPA backend choice.
//   - CUDA build (LLMPLAN_WITH_CUDA, set by CMake for a CUDA LibTorch): CUDA
//     events for per-op timing and the caching allocator's peak statistics.
//     Without it a CUDA run still trains, but per-op times are host wall times.
//
// Only executor .cc files include this header (it pulls in <torch/torch.h>).
#pragma once

#include <chrono>
#include <limits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <torch/version.h>

#ifdef LLMPLAN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#define LLMPLAN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace llmplan::compat {

inline std::string TorchVersion() { return TORCH_VERSION; }

// ---------------------------------------------------------------------------
// Attention

// Causal self-attention. q: [B, H, T, D]; k, v: [B, KV, T, D] with H a
// multiple of KV (grouped-query attention). Returns [B, H, T, D] in q's dtype.
inline at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t groups = q.size(1) / k.size(1);
#if LLMPLAN_TORCH_AT_LEAST(2, 5)
  // enable_gqa lets the kernel index shared k/v heads instead of us
  // materialising H/KV copies (measured on H200: same speed as expanded k/v on
  // the default backend, less memory).
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/{}, /*enable_gqa=*/groups > 1);
#elif LLMPLAN_TORCH_AT_LEAST(2, 0)
  at::Tensor ke = groups > 1 ? k.repeat_interleave(groups, 1) : k;
  at::Tensor ve = groups > 1 ? v.repeat_interleave(groups, 1) : v;
  return at::scaled_dot_product_attention(q, ke, ve, {}, 0.0, /*is_causal=*/true);
#else
  // LibTorch 1.13 has no public SDPA: plain attention. It materialises the
  // [B, H, T, T] scores, which is fine for the CPU test models it serves.
  at::Tensor ke = groups > 1 ? k.repeat_interleave(groups, 1) : k;
  at::Tensor ve = groups > 1 ? v.repeat_interleave(groups, 1) : v;
  const int64_t t = q.size(2);
  at::Tensor scores = at::matmul(q, ke.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  at::Tensor future = at::ones({t, t}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(probs, ve);
#endif
}

// Which fused attention kernel CausalAttention's call would run for these
// inputs: "math", "flash", "efficient", "cudnn", "overrideable", or "unknown"
// where LibTorch cannot say (1.x, or versions without enable_gqa in the query).
inline std::string AttentionBackendName(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if LLMPLAN_TORCH_AT_LEAST(2, 5)
  const int64_t groups = q.size(1) / k.size(1);
  const int64_t choice = at::_fused_sdp_choice(q, k, v, {}, 0.0, true, {}, groups > 1);
  switch (choice) {  // sdp::SDPBackend
    case 0: return "math";
    case 1: return "flash";
    case 2: return "efficient";
    case 3: return "cudnn";
    case 4: return "overrideable";
    default: return "error";
  }
#else
  (void)q;
  (void)k;
  (void)v;
  return "unknown";
#endif
}

// ---------------------------------------------------------------------------
// AdamW

// True when FusedAdamW below is available for tensors on `device`: one kernel
// reads p, g, m, v once and writes p, m, v once (the unfused form makes ~6
// passes over HBM).
inline bool HasFusedAdamW(const at::Device& device) {
#if LLMPLAN_TORCH_AT_LEAST(2, 1)
  return device.is_cuda();
#else
  (void)device;
  return false;
#endif
}

// One fused AdamW update of `param` (decoupled weight decay, torch.optim.AdamW
// semantics). `step` is a float32 scalar tensor on the param's device holding
// the step number (1-based) used for bias correction.
// REQUIRES: HasFusedAdamW(param.device()).
inline void FusedAdamW(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                       const at::Tensor& step, double lr, double beta1, double beta2, double weight_decay,
                       double eps) {
#if LLMPLAN_TORCH_AT_LEAST(2, 1)
  at::_fused_adamw_({param}, {grad}, {exp_avg}, {exp_avg_sq}, /*max_exp_avg_sqs=*/{}, {step}, lr, beta1, beta2,
                    weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)param, (void)grad, (void)exp_avg, (void)exp_avg_sq, (void)step, (void)lr, (void)beta1, (void)beta2,
      (void)weight_decay, (void)eps;
  TORCH_CHECK(false, "fused AdamW needs LibTorch >= 2.1");
#endif
}

// ---------------------------------------------------------------------------
// Device memory

struct MemoryPeaks {
  int64_t allocated = 0;  // peak bytes handed out by the allocator
  int64_t reserved = 0;   // peak bytes the allocator held from the device
  std::string source;     // what the numbers are
};

inline void ResetMemoryPeaks(const at::Device& device) {
#ifdef LLMPLAN_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#else
  (void)device;
#endif
}

// Peaks since the last ResetMemoryPeaks. On CPU (or a build without CUDA
// headers) both are the process's peak resident set size, which includes
// everything, not only tensors: `source` says so.
inline MemoryPeaks ReadMemoryPeaks(const at::Device& device, int64_t process_peak_rss_bytes) {
  MemoryPeaks peaks;
#ifdef LLMPLAN_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    // Index 0 is StatType::AGGREGATE in every version (the enum moved namespaces in 2.x).
    peaks.allocated = stats.allocated_bytes[0].peak;
    peaks.reserved = stats.reserved_bytes[0].peak;
    peaks.source = "cuda_caching_allocator";
    return peaks;
  }
#else
  (void)device;
#endif
  peaks.allocated = process_peak_rss_bytes;
  peaks.reserved = process_peak_rss_bytes;
  peaks.source = "process_peak_rss";
  return peaks;
}

// ---------------------------------------------------------------------------
// Storage release (FSDP's `storage.resize_(0)`)

// Frees the bytes under `tensor`'s storage but keeps the storage object, so
// every tensor aliasing it (the model's parameters over a flat buffer) sees
// the new bytes after MaterializeStorage without being rebuilt. On CUDA the
// block goes back to the caching allocator at once (stream-ordered: kernels
// already queued on the current stream still read it safely), which is what
// makes gathered parameters cost memory only while a unit computes.
// StorageImpl's data-pointer setters are the same in 1.13 and 2.x.
inline void ReleaseStorage(const at::Tensor& tensor) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, tensor.device()));
  storage->set_nbytes(0);
}

inline bool StorageMaterialized(const at::Tensor& tensor) { return tensor.storage().nbytes() > 0; }

// Gives a released storage `nbytes` fresh bytes from its own allocator
// (contents undefined). No-op when it already has them.
inline void MaterializeStorage(const at::Tensor& tensor, size_t nbytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->nbytes() >= nbytes) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

// ---------------------------------------------------------------------------
// Timing

// Times many operations of one step without stalling the device: on CUDA it
// records an event pair per op on the current stream and reads them all after
// one synchronize at the end of the step (a host wall clock would only measure
// kernel launches). On CPU ops run synchronously, so wall time is exact.
class OpTimer {
 public:
  explicit OpTimer(const at::Device& device) : device_(device) {}
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // REQUIRES: slots are numbered 0..n-1; Start(i) before Stop(i).
  void Start(int slot) {
    Grow(slot);
#ifdef LLMPLAN_WITH_CUDA
    if (device_.is_cuda()) {
      start_events_[slot].record(at::cuda::getCurrentCUDAStream(device_.index()));
      return;
    }
#endif
    start_wall_[slot] = std::chrono::steady_clock::now();
  }
  void Stop(int slot) {
#ifdef LLMPLAN_WITH_CUDA
    if (device_.is_cuda()) {
      stop_events_[slot].record(at::cuda::getCurrentCUDAStream(device_.index()));
      used_[slot] = true;
      return;
    }
#endif
    seconds_[slot] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_wall_[slot]).count();
    used_[slot] = true;
  }
  // Waits for the device, then returns seconds per slot (0 for slots not
  // timed since the last call) and clears them.
  std::vector<double> Collect() {
#ifdef LLMPLAN_WITH_CUDA
    if (device_.is_cuda()) {
      for (size_t i = 0; i < used_.size(); ++i) {
        if (!used_[i]) continue;
        stop_events_[i].synchronize();
        seconds_[i] = start_events_[i].elapsed_time(stop_events_[i]) / 1000.0;
      }
    }
#endif
    std::vector<double> out = seconds_;
    for (size_t i = 0; i < used_.size(); ++i) {
      if (!used_[i]) out[i] = 0;
      used_[i] = false;
    }
    return out;
  }

 private:
  void Grow(int slot) {
    const size_t n = static_cast<size_t>(slot) + 1;
    if (seconds_.size() >= n) return;
    seconds_.resize(n, 0.0);
    used_.resize(n, false);
    start_wall_.resize(n);
#ifdef LLMPLAN_WITH_CUDA
    // Timing events (the default CUDAEvent flags disable timing).
    while (start_events_.size() < n) {
      start_events_.emplace_back(cudaEventDefault);
      stop_events_.emplace_back(cudaEventDefault);
    }
#endif
  }

  at::Device device_;
  std::vector<double> seconds_;
  std::vector<bool> used_;
  std::vector<std::chrono::steady_clock::time_point> start_wall_;
#ifdef LLMPLAN_WITH_CUDA
  std::vector<at::cuda::CUDAEvent> start_events_, stop_events_;
#endif
};

// Blocks the host until the device has finished queued work (no-op on CPU).
inline void SynchronizeDevice(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? -1 : device.index());
}

// ---------------------------------------------------------------------------
// Distributed (c10d): TCPStore, PrefixStore, ProcessGroupGloo

// Gloo process groups need Gloo's own headers, which Debian's libtorch-dev
// ships (libgloo-dev) but a LibTorch wheel may not. Without them the Gloo
// communicator still compiles and refuses at run time with a clear message.
#if __has_include(<gloo/algorithm.h>) && __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
#define LLMPLAN_HAS_GLOO 1
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // ProcessGroupGloo.hpp is empty unless this is defined
#endif
#else
#define LLMPLAN_HAS_GLOO 0
#endif

// Gloo's ProcessGroup in 1.13 sums float/double/half/integers but not
// bfloat16; the Gloo communicator then sums bf16 in fp32 (also more accurate,
// and on CPU the extra conversion is cheap next to the TCP transfer).
// All-gather and broadcast move bytes, so they view bf16 as fp16 (same 2 bytes) instead.
#define LLMPLAN_GLOO_SUMS_BFLOAT16 0

#ifdef LLMPLAN_WITH_CUDA
// Tells the caching allocator that `tensor`'s memory is used on `stream` (a
// communicator's own stream), so freeing it on the caller's stream does not
// hand the block to another tensor while the collective still reads it.
inline void RecordStreamUse(const at::Tensor& tensor, c10::cuda::CUDAStream stream) {
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), stream);
}
#endif

}  // namespace llmplan::compat
