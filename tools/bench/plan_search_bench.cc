// The planner's full search, as `llmplan estimate` runs it: Llama-3-70B on
// 64 x H100 SXM, seq 8192, global batch 512 (every strategy, hybrid grouping,
// micro-batch, offload and checkpoint prefix the search tries, each simulated).
// The search is single-threaded; run under `taskset -c 0` to pin it to one core.
#include <benchmark/benchmark.h>

#include "planner/plan_search.h"
#include "simulator/evaluate.h"

namespace llmplan {
namespace {

void BM_PlanSearch_Llama3_70b_64xH100(benchmark::State& state) {
  const HardwareProfile profile = LoadHardwareProfile("h100-sxm-80g");
  SearchRequest req;
  req.model = PresetModel("llama3-70b");
  req.profile = "h100-sxm-80g";
  req.gpus = 64;
  req.seq_len = 8192;
  req.global_batch = 512;
  int evaluated = 0;
  for (auto _ : state) {
    SearchResult r = SearchPlans(req, profile, [&](const Plan& p) { return EvaluatePlan(p, profile); });
    if (!r.found) state.SkipWithError("no plan found");
    evaluated = r.evaluated;
    benchmark::DoNotOptimize(r.best.time.step_seconds);
  }
  state.counters["plans_simulated"] = evaluated;
  state.counters["plans/s"] = benchmark::Counter(static_cast<double>(evaluated) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PlanSearch_Llama3_70b_64xH100)->Unit(benchmark::kMillisecond);

// --gpus auto for the same model and batch (binary search over GPU counts).
void BM_PlanSearch_Llama3_70b_AutoGpus(benchmark::State& state) {
  const HardwareProfile profile = LoadHardwareProfile("h100-sxm-80g");
  SearchRequest req;
  req.model = PresetModel("llama3-70b");
  req.profile = "h100-sxm-80g";
  req.gpus = 0;
  req.seq_len = 8192;
  req.global_batch = 512;
  int gpus = 0;
  for (auto _ : state) {
    SearchResult r = SearchPlans(req, profile, [&](const Plan& p) { return EvaluatePlan(p, profile); });
    gpus = r.best.plan.gpus;
    benchmark::DoNotOptimize(r.best.time.step_seconds);
  }
  state.counters["gpus"] = gpus;
}
BENCHMARK(BM_PlanSearch_Llama3_70b_AutoGpus)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace llmplan

BENCHMARK_MAIN();
