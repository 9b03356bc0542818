// The offloaded optimizer's host pass: CpuAdamW writing the bf16 compute copy
// in the same sweep, against the update followed by LibTorch's cast (what the
// executor did before). Both bound by host memory bandwidth, so the figure is
// bytes moved per second and the ratio is the saving.
//
//   build/tools/cpu_adamw_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <ATen/ATen.h>

#include "executor/optimizer/cpu_adamw.h"

namespace {

using llmplan::executor::AdamWScalars;
using llmplan::executor::CpuAdamW;

constexpr int64_t kElements = int64_t{1} << 26;  // 64 Mi: 256 MiB per fp32 array, far past any cache

struct Buffers {
  at::Tensor p = at::randn({kElements}), g = at::randn({kElements}), m = at::zeros({kElements}),
             v = at::zeros({kElements}), bf16 = at::zeros({kElements}, at::kBFloat16);
};

AdamWScalars Scalars() {
  AdamWScalars s;
  s.decay = 1 - 1e-4f * 0.1f;
  s.step_size = -1e-4f;
  s.bias2_sqrt = 0.3f;
  return s;
}

void Count(benchmark::State& state) {
  // Read p, g, m, v; write p, m, v and the bf16 copy: 30 bytes per element either way.
  state.SetBytesProcessed(state.iterations() * kElements * 30);
}

void BM_CpuAdamW_ThenTorchCast(benchmark::State& state) {
  Buffers b;
  for (auto _ : state) {
    CpuAdamW(b.p.data_ptr<float>(), b.g.data_ptr<float>(), b.m.data_ptr<float>(), b.v.data_ptr<float>(), kElements,
             Scalars());
    b.bf16.copy_(b.p);
    benchmark::DoNotOptimize(b.bf16.data_ptr());
  }
  Count(state);
}
BENCHMARK(BM_CpuAdamW_ThenTorchCast)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CpuAdamW_WritesBf16InTheSamePass(benchmark::State& state) {
  Buffers b;
  for (auto _ : state) {
    CpuAdamW(b.p.data_ptr<float>(), b.g.data_ptr<float>(), b.m.data_ptr<float>(), b.v.data_ptr<float>(), kElements,
             Scalars(), 0, b.bf16.data_ptr(), /*compute_is_bf16=*/true);
    benchmark::DoNotOptimize(b.bf16.data_ptr());
  }
  Count(state);
}
BENCHMARK(BM_CpuAdamW_WritesBf16InTheSamePass)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
