// One optimizer step of Llama-3-70B (80 blocks) with 16 accumulation
// micro-batches, full_shard over 64 x H100, every block checkpointed: about
// 16 x (82 forward + 82 backward + 80 recompute + gathers, releases and
// reduce-scatters) operations. Simulating it is the inner loop of the plan
// search and of `llmplan simulate`.
#include <benchmark/benchmark.h>

#include "planner/step_program.h"
#include "simulator/evaluate.h"
#include "simulator/simulator.h"

namespace llmplan {
namespace {

Plan Llama70bPlan() {
  Plan p;
  p.model = PresetModel("llama3-70b");
  p.profile = "h100-sxm-80g";
  p.gpus = 64;
  p.gpus_per_node = 8;
  p.strategy = ShardingStrategy::kFullShard;
  p.seq_len = 8192;
  p.micro_batch = 1;
  p.grad_accum = 16;
  for (int i = 0; i < 80; ++i) p.checkpoint_layers.push_back(i);
  NormaliseGrouping(p);
  p.Validate();
  return p;
}

// Simulation only: the program is built once, outside the timed loop.
void BM_Simulate_Llama3_70b_16MicroBatches(benchmark::State& state) {
  const HardwareProfile profile = LoadHardwareProfile("h100-sxm-80g");
  const StepProgram program = BuildStepProgram(Llama70bPlan(), profile);
  const CostModel cost(profile);
  SimulationOptions options;
  options.record_timeline = state.range(0) != 0;
  for (auto _ : state) {
    SimulationResult r = Simulate(program, cost, options);
    benchmark::DoNotOptimize(r.step_seconds);
  }
  state.counters["ops"] = static_cast<double>(program.ops.size());
  state.counters["ops/s"] = benchmark::Counter(static_cast<double>(program.ops.size()) *
                                                   static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Simulate_Llama3_70b_16MicroBatches)->Arg(0)->Arg(1)->ArgName("timeline")->Unit(benchmark::kMicrosecond);

// Build + simulate + estimate: what the search pays per plan.
void BM_BuildAndSimulate_Llama3_70b_16MicroBatches(benchmark::State& state) {
  const HardwareProfile profile = LoadHardwareProfile("h100-sxm-80g");
  const Plan plan = Llama70bPlan();
  for (auto _ : state) {
    Estimate e = EvaluatePlan(plan, profile);
    benchmark::DoNotOptimize(e.time.step_seconds);
  }
}
BENCHMARK(BM_BuildAndSimulate_Llama3_70b_16MicroBatches)->Unit(benchmark::kMicrosecond);

// Building the program alone.
void BM_Build_Llama3_70b_16MicroBatches(benchmark::State& state) {
  const HardwareProfile profile = LoadHardwareProfile("h100-sxm-80g");
  const Plan plan = Llama70bPlan();
  for (auto _ : state) {
    StepProgram p = BuildStepProgram(plan, profile);
    benchmark::DoNotOptimize(p.ops.data());
  }
}
BENCHMARK(BM_Build_Llama3_70b_16MicroBatches)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace llmplan

BENCHMARK_MAIN();
