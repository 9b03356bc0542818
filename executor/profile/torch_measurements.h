// The profile's compute measurements, made through LibTorch exactly as the
// executor's model makes the calls: at::linear for every projection,
// compat::CausalAttention (fused SDPA with GQA on CUDA, the plain path on
// LibTorch 1.x) with backward through autograd, a tensor copy_ and an add for
// memory-bound kernels, and a one-element add_ for the cost of a kernel
// launch. The same code measures a GPU (device cuda:0, bf16) and the CPU
// executor (fp32), timed by SecondsPerCall (device_timer.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "executor/profile/device_timer.h"
#include "executor/profile/profile_measurements.h"

namespace llmplan::executor {

// Called after each shape: (done, total).
using ItemProgress = std::function<void(int done, int total)>;

// The bytes the executor's first block forward and backward leave allocated
// once every tensor they made is gone: the GEMM libraries' workspaces, which
// LibTorch takes from its caching allocator on first use and keeps. 0 on the
// CPU. REQUIRES: no GEMM has run on `device` in this process yet.
double MeasureGemmWorkspaceBytes(const c10::Device& device);

// Each shape's at::linear(x [tokens, in], W [out, in]). On a GPU `seconds` in
// bursts (kGemmBurstSeconds...) and `sustained_seconds` back to back for
// `budget`'s batches; on the CPU `seconds` for `budget`'s batches.
std::vector<GemmMeasurement> MeasureGemms(const c10::Device& device, c10::ScalarType dtype,
                                          const std::vector<GemmShape>& shapes, const TimingBudget& budget,
                                          const ItemProgress& progress);

// Forward alone and forward + backward (torch::autograd::grad of q, k, v) of
// each shape, causal, in `dtype`.
std::vector<AttentionMeasurement> MeasureAttention(const c10::Device& device, c10::ScalarType dtype,
                                                   const std::vector<AttentionShape>& shapes,
                                                   const TimingBudget& budget, const ItemProgress& progress);

// dst.copy_(src) of a `bytes` fp32 tensor: 2 x bytes moved (read + write).
BandwidthMeasurement MeasureCopy(const c10::Device& device, double bytes, const TimingBudget& budget);
// at::add_out(c, a, b) of three `bytes` fp32 tensors: 3 x bytes moved.
BandwidthMeasurement MeasureAdd(const c10::Device& device, double bytes, const TimingBudget& budget);

// `kernels` x.add_(1) on a one-element tensor: host seconds to issue one, and
// device seconds per op when they queue back to back (on CUDA behind a
// blocker of large GEMMs long enough for the host to queue them all; on the
// CPU the ops are synchronous, so both are the op's time).
// REQUIRES: kernels >= 1.
LaunchMeasurement MeasureLaunch(const c10::Device& device, int kernels);

// The caching allocator's reserved bytes on `device` now (0 on the CPU).
double AllocatorReservedBytes(const c10::Device& device);

// The version of the LibTorch this was built against, "2.11.0".
std::string TorchVersion();

// The threads LibTorch's CPU ops use (at::get_num_threads: the physical cores
// by default), which the CPU executor's GEMMs run on.
int TorchCpuThreads();

}  // namespace llmplan::executor
