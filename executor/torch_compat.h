// torch_compat: every difference between the LibTorch versions the executor
// builds against (Debian's 1.13 CPU build on dev/CI machines, 2.x + CUDA on the
// GPU machine) lives here, so the rest of the executor is version-free.
//
// Two axes:
//   - LibTorch version (TORCH_VERSION_MAJOR/MINOR): scaled-dot-product
//     attention, fused AdamW, SDPA backend choice.
//   - CUDA build (LLMPLAN_WITH_CUDA, set by CMake for a CUDA LibTorch): CUDA
//     events for per-op timing and the caching allocator's statistics.
//     Without it a CUDA run still trains, but per-op times are host wall times.
//
// Only executor .cc files include this header. It pulls in ATen, autograd and
// the profiler, not <torch/torch.h>: the whole C++ frontend (nn, optim, data,
// serialize) doubles what each file costs to compile (28 s against 13 s on a
// 2-core CI machine) and the executor uses none of it.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/version.h>

#ifdef LLMPLAN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#endif

#define LLMPLAN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace llmplan::compat {

inline std::string TorchVersion() { return TORCH_VERSION; }

// ---------------------------------------------------------------------------
// Attention

// The plain attention's softmax dtype: fp32 for bf16 and fp32 inputs (as
// SDPA's math path), fp64 for fp64 (the exactness tests).
inline at::ScalarType SoftmaxType(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

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
  at::Tensor probs = at::softmax(scores, -1, SoftmaxType(q)).to(q.scalar_type());
  return at::matmul(probs, ve);
#endif
}

// Whether DocumentAttention runs FlashAttention's variable-length kernel
// (LibTorch's _flash_attention_forward with cumulative sequence lengths: a
// CUDA build of LibTorch >= 2.3, bf16 or fp16, heads a multiple of 8 wide up
// to 256), which computes only the tiles inside each document. Otherwise it
// runs attention under the layout's block-diagonal mask, which computes every
// tile of the window and hides the rest (attention_layout.h: the mask exists
// only then).
inline bool DocumentAttentionUsesFlash(const at::Device& device, at::ScalarType dtype, int64_t head_dim) {
#if defined(LLMPLAN_WITH_CUDA) && LLMPLAN_TORCH_AT_LEAST(2, 3)
  return device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf) && head_dim % 8 == 0 && head_dim <= 256;
#else
  (void)device, (void)dtype, (void)head_dim;
  return false;
#endif
}

// Causal self-attention inside each document of a packed window
// (executor/model/attention_layout.h). q: [B, T, H, D]; k, v: [B, T, KV, D],
// contiguous in that order (as the projections make them). Returns
// [B, T, H, D] in q's dtype. cu_seqlens (int32, pieces + 1) and
// longest_piece drive the flash kernel; `hidden` (bool [B, 1, T, T], true:
// masked) the composite form.
// REQUIRES: hidden is defined exactly when !DocumentAttentionUsesFlash(q's).
inline at::Tensor DocumentAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& cu_seqlens, int64_t longest_piece, const at::Tensor& hidden) {
  const int64_t groups = q.size(2) / k.size(2);
#if defined(LLMPLAN_WITH_CUDA) && LLMPLAN_TORCH_AT_LEAST(2, 3)
  if (!hidden.defined()) {
    const int64_t batch = q.size(0), t = q.size(1);
    // The varlen kernel reads [total tokens, heads, D]: the [B, T, H, D]
    // tensors as they lie in memory. It indexes the shared k/v heads itself
    // (grouped-query attention) and has its own backward in autograd.
    const auto flat = [&](const at::Tensor& x) { return x.view({batch * t, x.size(2), x.size(3)}); };
    const auto result = at::_flash_attention_forward(flat(q), flat(k), flat(v), cu_seqlens, cu_seqlens, longest_piece,
                                                     longest_piece, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                     /*return_debug_mask=*/false, /*scale=*/std::nullopt);
    return std::get<0>(result).view(q.sizes());
  }
#else
  (void)cu_seqlens, (void)longest_piece;
#endif
  TORCH_CHECK(hidden.defined(), "DocumentAttention: this build has no flash kernel for these inputs: pass the mask");
  const at::Tensor qh = q.transpose(1, 2), kh = k.transpose(1, 2), vh = v.transpose(1, 2);
#if LLMPLAN_TORCH_AT_LEAST(2, 5)
  return at::scaled_dot_product_attention(qh, kh, vh, hidden.logical_not(), 0.0, /*is_causal=*/false, {},
                                          /*enable_gqa=*/groups > 1)
      .transpose(1, 2);
#elif LLMPLAN_TORCH_AT_LEAST(2, 0)
  at::Tensor ke = groups > 1 ? kh.repeat_interleave(groups, 1) : kh;
  at::Tensor ve = groups > 1 ? vh.repeat_interleave(groups, 1) : vh;
  return at::scaled_dot_product_attention(qh, ke, ve, hidden.logical_not(), 0.0, /*is_causal=*/false).transpose(1, 2);
#else
  // CausalAttention's plain form, the layout's mask in place of the causal one.
  at::Tensor ke = groups > 1 ? kh.repeat_interleave(groups, 1) : kh;
  at::Tensor ve = groups > 1 ? vh.repeat_interleave(groups, 1) : vh;
  at::Tensor scores = at::matmul(qh, ke.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  scores = scores.masked_fill(hidden, -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1, SoftmaxType(q)).to(q.scalar_type());
  return at::matmul(probs, ve).transpose(1, 2);
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
// cuBLASLt

#ifdef LLMPLAN_WITH_CUDA
// The cuBLASLt handle ATen's GEMMs use on the current stream and that
// stream's cuBLASLt workspace. LibTorch 2.11 keeps it apart from the cuBLAS
// workspace (unless TORCH_CUBLASLT_UNIFIED_WORKSPACE=1): 1 MiB more per
// stream, allocated through the caching allocator at the first call and kept,
// which the profile's memory.workspace_bytes counts (MeasureGemmWorkspaceBytes
// runs a block, residual GEMMs included; ResidualGemmGpuTest checks nothing
// else is taken). handle is null below the guard's 2.3 (built and tested on
// 2.11 only): the caller then keeps to ATen's GEMMs.
struct BlasLtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

inline BlasLtContext CurrentBlasLt() {
  BlasLtContext context;
#if LLMPLAN_TORCH_AT_LEAST(2, 3)
  (void)at::cuda::getCurrentCUDABlasHandle();  // sets the stream's workspace up before its first GEMM
  context.handle = at::cuda::getCurrentCUDABlasLtHandle();
  context.workspace = at::cuda::getCUDABlasLtWorkspace();
  context.workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
#endif
  return context;
}
#endif

// ---------------------------------------------------------------------------
// Memory statistics

// The allocator's view of one device's memory: the bytes tensors hold
// (allocated) and the bytes the allocator holds from the device (reserved),
// now and at the highest point since the last ResetMemoryPeaks. On CUDA
// these are the caching allocator's own statistics, kept on the host at the
// moment a tensor is allocated or freed (not when kernels run).
struct MemoryStats {
  int64_t allocated = 0, reserved = 0;
  int64_t peak_allocated = 0, peak_reserved = 0;
  std::string source;  // "cuda_caching_allocator", "cpu_tensor_bytes" or "process_peak_rss"
};

// Counts the bytes of LibTorch's CPU tensors, which no CPU allocator reports:
// a CPU allocator (c10::alloc_cpu / free_cpu, as the default one uses) that
// keeps a running total. LibTorch 1.13 only: 2.x changed the Allocator
// interface, and there CPU memory is the process's peak RSS instead.
#if !LLMPLAN_TORCH_AT_LEAST(2, 0)
class CpuTensorCounter final : public c10::Allocator {
 public:
  static CpuTensorCounter& Get() {
    static CpuTensorCounter counter;
    return counter;
  }
  c10::DataPtr allocate(size_t n) const override {
    void* data = c10::alloc_cpu(n);
    Get().Add(data, static_cast<int64_t>(n));
    return {data, data, &Delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }
  void ResetPeak() { peak_.store(current_.load()); }

 private:
  static void Delete(void* data) {
    if (data == nullptr) return;
    Get().Remove(data);
    c10::free_cpu(data);
  }
  void Add(void* data, int64_t n) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[data] = n;
    }
    const int64_t now = current_.fetch_add(n) + n;
    int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
  }
  void Remove(void* data) {
    int64_t n = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = sizes_.find(data);
      if (it == sizes_.end()) return;
      n = it->second;
      sizes_.erase(it);
    }
    current_.fetch_sub(n);
  }
  std::mutex mutex_;
  std::unordered_map<void*, int64_t> sizes_;
  std::atomic<int64_t> current_{0}, peak_{0};
};
#endif

// Makes CPU tensors created from now on counted (see CpuTensorCounter).
// Returns false where this LibTorch cannot count them.
inline bool InstallCpuTensorCounter() {
#if !LLMPLAN_TORCH_AT_LEAST(2, 0)
  static const bool installed = [] {
    c10::SetCPUAllocator(&CpuTensorCounter::Get(), /*priority=*/100);
    return true;
  }();
  return installed;
#else
  return false;
#endif
}

inline void ResetMemoryPeaks(const at::Device& device) {
#ifdef LLMPLAN_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
    return;
  }
#endif
  (void)device;
#if !LLMPLAN_TORCH_AT_LEAST(2, 0)
  CpuTensorCounter::Get().ResetPeak();
#endif
}

// Hands the caching allocator's unused blocks on `device` back to the driver
// (torch.cuda.empty_cache()), so another process can have them. No-op on a CPU.
inline void ReleaseCachedMemory(const at::Device& device) {
#ifdef LLMPLAN_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  (void)device;
}

// The statistics of `device` (see MemoryStats). On a CPU without the tensor
// counter all four are `process_peak_rss_bytes`, and `source` says so.
inline MemoryStats ReadMemoryStats(const at::Device& device, int64_t process_peak_rss_bytes) {
  MemoryStats m;
#ifdef LLMPLAN_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    // Index 0 is StatType::AGGREGATE in every version (the enum moved namespaces in 2.x).
    m.allocated = stats.allocated_bytes[0].current;
    m.reserved = stats.reserved_bytes[0].current;
    m.peak_allocated = stats.allocated_bytes[0].peak;
    m.peak_reserved = stats.reserved_bytes[0].peak;
    m.source = "cuda_caching_allocator";
    return m;
  }
#endif
  (void)device;
#if !LLMPLAN_TORCH_AT_LEAST(2, 0)
  if (InstallCpuTensorCounter()) {
    const CpuTensorCounter& c = CpuTensorCounter::Get();
    m.allocated = m.reserved = c.current();
    m.peak_allocated = m.peak_reserved = c.peak();
    m.source = "cpu_tensor_bytes";
    return m;
  }
#endif
  m.allocated = m.reserved = m.peak_allocated = m.peak_reserved = process_peak_rss_bytes;
  m.source = "process_peak_rss";
  return m;
}

// ---------------------------------------------------------------------------
// Out of memory

// True when `e` is an allocator's out-of-memory failure: the CUDA caching
// allocator's c10::OutOfMemoryError (LibTorch 2.x; "CUDA out of memory" in a
// plain c10::Error on older builds) or the CPU allocator's "can't allocate
// memory" (1.13) or "not enough memory" (2.x), a plain c10::Error in every
// version.
inline bool IsOutOfMemory(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string& message = e.msg();
  return message.find("out of memory") != std::string::npos ||
         message.find("can't allocate memory") != std::string::npos ||
         message.find("not enough memory") != std::string::npos;
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

// A moment on the current stream of a device, for measuring where an op ran:
// on CUDA a timing event recorded on the current stream (the host never
// waits for it until Seconds), on the CPU the host clock (ops are synchronous).
// Recorded while the stream is captured into a CUDA graph (StepGraph), the
// event becomes a node of the graph, recorded again at every replay (CUDA's
// external event records): a replayed op keeps its measured span.
class StreamMark {
 public:
  StreamMark() = default;
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;
  ~StreamMark() {
#ifdef LLMPLAN_WITH_CUDA
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
#endif
  }

  void Record(const at::Device& device) {
#ifdef LLMPLAN_WITH_CUDA
    if (device.is_cuda()) {
      const c10::cuda::CUDAGuard on(device);
      if (event_ == nullptr) C10_CUDA_CHECK(cudaEventCreate(&event_));  // timing enabled
      const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device.index()).stream();
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
      if (capture == cudaStreamCaptureStatusActive)
        C10_CUDA_CHECK(cudaEventRecordWithFlags(event_, stream, cudaEventRecordExternal));
      else
        C10_CUDA_CHECK(cudaEventRecord(event_, stream));
      on_device_ = true;
      return;
    }
#endif
    (void)device;
    host_ = std::chrono::steady_clock::now();
    on_device_ = false;
  }
  // Seconds from `start` (recorded on the same device, maybe another stream)
  // to this mark. REQUIRES: both recorded and, on CUDA, this one completed.
  double SecondsSince(const StreamMark& start) const {
#ifdef LLMPLAN_WITH_CUDA
    if (on_device_) {
      float ms = 0;
      C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
      return ms / 1000.0;
    }
#endif
    return std::chrono::duration<double>(host_ - start.host_).count();
  }
  // Waits for the mark on the host (no-op on the CPU).
  void Synchronize() const {
#ifdef LLMPLAN_WITH_CUDA
    if (on_device_) C10_CUDA_CHECK(cudaEventSynchronize(event_));
#endif
  }
  // The CUDA event (a cudaEvent_t) when recorded on a GPU, else null.
  void* cuda_event() const {
#ifdef LLMPLAN_WITH_CUDA
    if (on_device_) return static_cast<void*>(event_);
#endif
    return nullptr;
  }

 private:
  bool on_device_ = false;
  std::chrono::steady_clock::time_point host_;
#ifdef LLMPLAN_WITH_CUDA
  cudaEvent_t event_ = nullptr;
#endif
};

// Blocks the host until the device has finished queued work (no-op on CPU).
inline void SynchronizeDevice(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? -1 : device.index());
}

// ---------------------------------------------------------------------------
// Kineto: LibTorch's profiler (the one torch.profiler drives), for a kernel
// trace of one step. Its C++ entry points are torch::autograd::profiler's and
// have the same shape in 1.13 and 2.x. CUDA activity needs a CUDA build with
// CUPTI (the wheels have it); CPU activity records the host's aten ops.

// Starts recording host ops and, with `cuda`, every kernel, copy and memset
// on the device (CUPTI timestamps).
// REQUIRES: no profiler running. Throws c10::Error if this LibTorch has no
// Kineto.
inline void StartKernelTrace(bool cuda) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
}

// Stops the profiler StartKernelTrace started and writes its Chrome trace
// (Kineto's JSON: traceEvents with "kernel", "gpu_memcpy", "cpu_op", ...).
inline void StopKernelTrace(const std::string& chrome_trace_path) {
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result = torch::autograd::profiler::disableProfiler();
  TORCH_CHECK(result != nullptr, "the profiler returned no result");
  result->save(chrome_trace_path);
}

// ---------------------------------------------------------------------------
// Distributed (c10d): TCPStore, PrefixStore, ProcessGroupGloo

// Gloo process groups need Gloo's own headers, which Debian's libtorch-dev
// ships (libgloo-dev) but a LibTorch wheel may not. Without them the Gloo
// communicator still compiles and refuses at run time with a clear message
// (as it does when configured with -DLLMPLAN_WITH_GLOO=OFF).
#if !defined(LLMPLAN_WITHOUT_GLOO) && __has_include(<gloo/algorithm.h>) && __has_include(<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>)
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


}  // namespace llmplan::compat
