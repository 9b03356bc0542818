// The profile's LibTorch measurements (see torch_measurements.h).
#include "executor/profile/torch_measurements.h"

#include "executor/model/llama_model.h"
#include "executor/step/step_graph.h"
#include "executor/torch_compat.h"
#include "planner/model_spec.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <ATen/Parallel.h>

namespace llmplan::executor {

namespace {

const char* DTypeName(c10::ScalarType dtype) { return dtype == at::kBFloat16 ? "bf16" : dtype == at::kHalf ? "fp16" : "fp32"; }

// Values drawn in fp32 and cast: LibTorch 1.13 cannot draw every dtype on the CPU.
at::Tensor Random(at::IntArrayRef sizes, c10::ScalarType dtype, const c10::Device& device, double scale = 1.0) {
  return (at::randn(sizes, at::TensorOptions().dtype(at::kFloat).device(device)) * scale).to(dtype);
}

double FloatElements(double bytes) { return std::max(1.0, std::floor(bytes / 4)); }

}  // namespace

double MeasureGemmWorkspaceBytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  // The executor's own first block: forward and backward of one Llama-3.2-1B
  // layer over 512 tokens, then every tensor it made dropped. What stays
  // allocated is what the libraries kept on first use (cuBLAS's and
  // cuBLASLt's workspaces, by LibTorch's choice of path for each GEMM), which
  // a pair of bare at::linear calls undercounts (33 MiB against the 64 MiB
  // the executor keeps on an H200 with LibTorch 2.11).
  ModelSpec spec = PresetModel("llama3.2-1b");
  spec.layers = 1;
  const LlamaModel model(spec);
  const int unit = model.block_unit(0);
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(device);
  std::vector<at::Tensor> params;
  for (const ParamShape& shape : model.unit_params(unit)) params.push_back(at::empty(shape.shape, bf16));
  model.InitUnit(unit, params, /*seed=*/1);
  for (at::Tensor& p : params) p.requires_grad_(true);
  constexpr int64_t kTokens = 512;
  const RopeTable rope = model.MakeRopeTable(kTokens, device, at::kBFloat16);
  at::Tensor x = Random({1, kTokens, spec.hidden}, at::kBFloat16, device).requires_grad_(true);
  compat::SynchronizeDevice(device);
  const int64_t before = compat::ReadMemoryStats(device, 0).allocated;
  {
    const at::Tensor y = model.BlockForward(0, params, x, rope);
    torch::autograd::backward({y}, {at::ones_like(y)});
  }
  for (at::Tensor& p : params) p.mutable_grad().reset();
  x.mutable_grad().reset();
  compat::SynchronizeDevice(device);
  const int64_t after = compat::ReadMemoryStats(device, 0).allocated;
  return std::max<double>(0, static_cast<double>(after - before));
}

std::vector<GemmMeasurement> MeasureGemms(const c10::Device& device, c10::ScalarType dtype,
                                          const std::vector<GemmShape>& shapes, const TimingBudget& budget,
                                          const ItemProgress& progress) {
  std::vector<GemmMeasurement> rows;
  for (const GemmShape& shape : shapes) {
    // Weights scaled as an initialised layer's, so values stay finite in bf16.
    const at::Tensor x = Random({shape.tokens, shape.in}, dtype, device);
    const at::Tensor w = Random({shape.out, shape.in}, dtype, device, 1.0 / std::sqrt(static_cast<double>(shape.in)));
    GemmMeasurement row;
    row.shape = shape;
    row.dtype = DTypeName(dtype);
    const auto linear = [&] { (void)at::linear(x, w); };
    // On a GPU the fit reads GEMMs as a step runs them, between other kernels (device_timer.h);
    // the back-to-back time stays in the table beside it, to show what the power limit takes.
    // The CPU has no such limit: its GEMMs are timed in the budget's longer, steadier batches.
    if (device.is_cuda()) {
      row.seconds = BurstSecondsPerCall(device, linear, kGemmBurstSeconds, kGemmBursts, kGemmIdleSeconds);
      row.sustained_seconds = SecondsPerCall(device, linear, budget);
    } else {
      row.seconds = SecondsPerCall(device, linear, budget);
    }
    rows.push_back(row);
    if (progress) progress(static_cast<int>(rows.size()), static_cast<int>(shapes.size()));
  }
  return rows;
}

std::vector<AttentionMeasurement> MeasureAttention(const c10::Device& device, c10::ScalarType dtype,
                                                   const std::vector<AttentionShape>& shapes,
                                                   const TimingBudget& budget, const ItemProgress& progress) {
  std::vector<AttentionMeasurement> rows;
  for (const AttentionShape& s : shapes) {
    at::Tensor q = Random({s.batch, s.heads, s.seq, s.head_dim}, dtype, device);
    at::Tensor k = Random({s.batch, s.kv_heads, s.seq, s.head_dim}, dtype, device);
    at::Tensor v = Random({s.batch, s.kv_heads, s.seq, s.head_dim}, dtype, device);
    for (at::Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
    const at::Tensor grad_out = Random({s.batch, s.heads, s.seq, s.head_dim}, dtype, device);
    AttentionMeasurement row;
    row.shape = s;
    row.dtype = DTypeName(dtype);
#if LLMPLAN_TORCH_AT_LEAST(2, 0)
    row.backend = compat::AttentionBackendName(q, k, v);
#else
    row.backend = "plain";  // LibTorch 1.x: matmul, mask, softmax, matmul (compat::CausalAttention)
#endif
    // Forward as training runs it: with autograd recording (the kernel then
    // also saves what backward needs).
    row.forward_s = SecondsPerCall(device, [&] { (void)compat::CausalAttention(q, k, v); }, budget);
    // The backward timed on its own, over one forward's retained graph: as
    // the difference of two timings (forward + backward minus forward) it
    // came out near zero on a loaded 2-core CPU — a backward rate of 3e20
    // FLOP/s, which the profile then refused.
    const at::Tensor out = compat::CausalAttention(q, k, v);
    const double backward_s = SecondsPerCall(
        device,
        [&] { (void)torch::autograd::grad({out}, {q, k, v}, {grad_out}, /*retain_graph=*/true); },
        budget);
    row.forward_backward_s = row.forward_s + backward_s;
    rows.push_back(row);
    if (progress) progress(static_cast<int>(rows.size()), static_cast<int>(shapes.size()));
  }
  return rows;
}

BandwidthMeasurement MeasureCopy(const c10::Device& device, double bytes, const TimingBudget& budget) {
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  const int64_t n = static_cast<int64_t>(FloatElements(bytes));
  const at::Tensor src = at::ones({n}, options);
  at::Tensor dst = at::empty({n}, options);
  BandwidthMeasurement m;
  m.bytes = 2.0 * static_cast<double>(n) * 4;
  m.what = "copy_ of " + std::to_string(n * 4 >> 20) + " MiB";
  m.seconds = SecondsPerCall(device, [&] { dst.copy_(src); }, budget);
  return m;
}

BandwidthMeasurement MeasureAdd(const c10::Device& device, double bytes, const TimingBudget& budget) {
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  const int64_t n = static_cast<int64_t>(FloatElements(bytes));
  const at::Tensor a = at::ones({n}, options), b = at::ones({n}, options);
  at::Tensor c = at::empty({n}, options);
  BandwidthMeasurement m;
  m.bytes = 3.0 * static_cast<double>(n) * 4;
  m.what = "add of 3 x " + std::to_string(n * 4 >> 20) + " MiB";
  m.seconds = SecondsPerCall(device, [&] { at::add_out(c, a, b); }, budget);
  return m;
}

LaunchMeasurement MeasureLaunch(const c10::Device& device, int kernels) {
  at::Tensor x = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device));
  for (int i = 0; i < 100; ++i) x.add_(1);
  compat::SynchronizeDevice(device);
  LaunchMeasurement m;
  m.kernels = kernels;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kernels; ++i) x.add_(1);
  m.host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kernels;
  compat::SynchronizeDevice(device);
  if (!device.is_cuda()) {
    m.device_s = m.host_s;
    return m;
  }
  // Keep the device busy while the host queues the tiny ops, so they then
  // run back to back and the events measure the device's cost per kernel,
  // not the host's. In rounds of at most kRound: CUDA holds about 1,024
  // launches pending (launch_queue_depth), and past that the host blocks and
  // feeds the rest at its own issue rate, which the device then waits on:
  // timed as 2,000 at once, an H100 read 4.16 us a kernel, against 1.97 us
  // timed as 500 (two H100 machines, 2026-12-07).
  constexpr int kRound = 250;
  m.device_round = kRound;
  const at::Tensor a = Random({4096, 4096}, at::kBFloat16, device);
  const double gemm_s = SecondsPerCall(device, [&] { (void)at::mm(a, a); }, {0.01, 1, 100});
  const int blockers = static_cast<int>(std::ceil(3 * kRound * m.host_s / gemm_s)) + 1;
  compat::StreamMark begin, end;
  double device_total_s = 0;
  for (int done = 0; done < kernels;) {
    const int round = std::min(kRound, kernels - done);
    for (int i = 0; i < blockers; ++i) (void)at::mm(a, a);
    begin.Record(device);
    for (int i = 0; i < round; ++i) x.add_(1);
    end.Record(device);
    end.Synchronize();
    device_total_s += end.SecondsSince(begin);
    done += round;
  }
  m.device_s = device_total_s / kernels;
#ifdef LLMPLAN_WITH_CUDA
  // The same kernels captured once and replayed (Plan::cuda_graph): the
  // device takes each from the graph, without the host's queue between.
  executor::StepGraph graph(device);
  graph.Capture([&] {
    for (int i = 0; i < kernels; ++i) x.add_(1);
  });
  graph.Replay();  // the first replay uploads the graph
  for (int i = 0; i < blockers; ++i) (void)at::mm(a, a);
  begin.Record(device);
  graph.Replay();
  end.Record(device);
  end.Synchronize();
  m.graph_device_s = end.SecondsSince(begin) / kernels;
#endif
  return m;
}

double AllocatorReservedBytes(const c10::Device& device) {
  return device.is_cuda() ? static_cast<double>(compat::ReadMemoryStats(device, 0).reserved) : 0.0;
}

std::string TorchVersion() { return compat::TorchVersion(); }

int TorchCpuThreads() { return at::get_num_threads(); }

}  // namespace llmplan::executor
