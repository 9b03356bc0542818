// KernelProfile: where one training step's device time went, kernel by
// kernel, read from a Kineto Chrome trace — the file `llmplan run
// --kernel-trace STEP` writes (LibTorch's profiler around one step) and the
// one PyTorch's torch.profiler exports, so llmplan's step and a PyTorch
// peer's are summed up by the same rules and can be read side by side.
//
// The executor's op times (op_times.jsonl) say how long each step-program op
// took; this says what ran inside the ops and when the device ran nothing:
//   span   the first device activity's start to the last one's end
//   busy   the union over every stream of kernel, copy and memset intervals
//   idle   span - busy: launch gaps, waits for the host, for a copy or for a
//          collective (a GPU waiting on an event runs nothing)
// Kernel time is split into the classes the cost model prices apart (GEMM,
// attention, collectives, copies, llmplan's fused block/loss/optimizer
// kernels, other elementwise and reduction kernels), each with the most
// expensive kernels by name. Times are CUPTI's device timestamps, so they hold
// even while the host runs ahead.
//
// No LibTorch: the trace is plain JSON.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmplan {

enum class KernelClass {
  kGemm,          // cuBLAS / CUTLASS matrix products
  kAttention,     // flash, memory-efficient or cuDNN attention, forward or backward
  kCollective,    // NCCL
  kCopy,          // memcpy / memset (host<->device, device<->device)
  kBlockKernel,   // llmplan's fused RMSNorm / RoPE / SwiGLU (executor/model/block_kernels.cu)
  kLossKernel,    // llmplan's fused cross-entropy softmax, or a framework's cross-entropy / softmax
  kOptimizer,     // AdamW (llmplan's fused kernel, or a framework's multi-tensor one)
  kOther,         // the rest: elementwise, reductions, casts, embedding, ...
};
inline constexpr int kKernelClasses = 8;
// "gemm", "attention", "collective", "copy", "block_kernel", "loss", "optimizer", "other".
const char* KernelClassName(KernelClass c);

// The class of one device event by its name and trace category ("kernel",
// "gpu_memcpy", "gpu_memset"; older traces spell them "Kernel", "Memcpy",
// "Memset").
KernelClass ClassifyKernel(const std::string& name, const std::string& category);

// One device activity of the trace: seconds on the trace's clock.
struct DeviceEvent {
  std::string name, category;
  int64_t stream = 0;
  double start_s = 0, duration_s = 0;
};

struct KernelStat {
  std::string name;
  KernelClass kernel_class = KernelClass::kOther;
  int64_t count = 0;
  double total_s = 0;
};

struct KernelClassStat {
  int64_t count = 0;
  double total_s = 0;  // summed over kernels (overlapping streams add up)
};

// A stretch of the span in which no stream ran anything, between the end of
// the activity named `before` and the start of `after`.
struct IdleGap {
  double start_s = 0, duration_s = 0;
  std::string before, after;
};

// Gaps up to this long are the device's own turnaround between dependent
// kernels on a stream (launch latency, the drain of one grid before the next
// starts: a few microseconds on an H200 even when the host is far ahead);
// fewer kernels or CUDA graphs shrink them. Longer ones are waits: for the
// host, a copy or a collective.
inline constexpr double kKernelTurnaroundS = 20e-6;

struct KernelProfile {
  int64_t events = 0;   // device events summed up
  int64_t streams = 0;  // distinct streams they ran on
  double start_s = 0;  // the first activity's start, on the trace's clock
  double span_s = 0, busy_s = 0;
  double idle_s() const { return span_s - busy_s; }
  // idle_s() split at kKernelTurnaroundS: how many gaps and their total.
  int64_t turnaround_gaps = 0, wait_gaps = 0;
  double turnaround_idle_s = 0, wait_idle_s = 0;
  std::vector<IdleGap> longest_gaps;  // the kMaxGapsKept longest, longest first
  KernelClassStat classes[kKernelClasses];
  std::vector<KernelStat> kernels;  // every distinct name, most total time first
  const KernelClassStat& of(KernelClass c) const { return classes[static_cast<int>(c)]; }
};

inline constexpr int kMaxGapsKept = 10;

// Sums up device events (any order).
KernelProfile SummarizeKernels(const std::vector<DeviceEvent>& events);

// The device events of a Chrome trace (traceEvents of phase "X" whose
// category is a kernel, memcpy or memset), timestamps in microseconds as
// Kineto writes them. Throws UserError naming the file when it cannot be read
// or is not such a trace (no traceEvents array).
std::vector<DeviceEvent> ReadDeviceEvents(const std::string& trace_path);

// The largest trace read: a step of a large model is tens of thousands of
// kernels plus the host's ops, a few tens of MiB.
inline constexpr int64_t kMaxKernelTraceBytes = int64_t{1} << 30;

// Text for a person: span, busy, idle (turnaround and waits, the longest
// waits with their neighbours), each class's share, the `top` most expensive
// kernels (names shortened to 90 characters).
void PrintKernelProfile(std::ostream& out, const KernelProfile& profile, int top);

// {"events", "streams", "span_s", "busy_s", "idle_s",
//  "idle": {"turnaround_gaps", "turnaround_s", "wait_gaps", "wait_s",
//           "longest": [{"start_s", "duration_s", "before", "after"}]},
//  "classes": {CLASS: {"count", "total_s"}},
//  "kernels": [{"name", "class", "count", "total_s"}] (the `top` first)}
nlohmann::json KernelProfileJson(const KernelProfile& profile, int top);

// What `llmplan run --kernel-trace STEP` makes of the traced step: the trace
// at `trace_path` summed up into kernel_profile.json beside it (the top 40
// kernels, with "step" and "trace" added), and, when `progress`, the summary
// (top 12) on stderr. Throws UserError when the trace cannot be read or the
// file cannot be written.
void WriteKernelProfile(int64_t step, const std::string& trace_path, bool progress);

}  // namespace llmplan
