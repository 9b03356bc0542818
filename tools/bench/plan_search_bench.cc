// The planner's full search, as `llmplan estimate` runs it: Llama-3-70B on
// 64 x H100 SXM, seq 8192, global batch 512 (every strategy, hybrid grouping,
// micro-batch, offload and checkpoint prefix the search tries, each simulated).
// The search is single-threaded; run under `taskset -c 0` to pin it to one core.
#include <benchmark/benchmark.h>

#include <vector>

#include "planner/plan_search.h"
#include "planner/program_builder.h"
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

// The parts of one evaluation (simulator/evaluate.cc's EvaluatePlan), each
// timed over every plan the 70B search above evaluates (one iteration = the
// whole list): where a search's time goes.
struct SearchPlansOf70b {
  HardwareProfile profile = LoadHardwareProfile("h100-sxm-80g");
  std::vector<Plan> plans;
  std::vector<StepProgram> programs;
  std::vector<MemoryTimeline> memories;
  SearchPlansOf70b() {
    SearchRequest req;
    req.model = PresetModel("llama3-70b");
    req.profile = "h100-sxm-80g";
    req.gpus = 64;
    req.seq_len = 8192;
    req.global_batch = 512;
    SearchPlans(req, profile, [&](const Plan& p) {
      plans.push_back(p);
      return EvaluatePlan(p, profile);
    });
    for (const Plan& p : plans) {
      programs.push_back(BuildStepProgram(p, profile, /*op_names=*/false));  // as EvaluatePlan
      memories.push_back(ReplayMemory(programs.back()));
    }
  }
};
const SearchPlansOf70b& Plans70b() {
  static const SearchPlansOf70b plans;
  return plans;
}

void BM_Part_BuildStepProgram(benchmark::State& state) {
  const SearchPlansOf70b& s = Plans70b();
  for (auto _ : state)
    for (const Plan& p : s.plans) benchmark::DoNotOptimize(BuildStepProgram(p, s.profile, /*op_names=*/false).ops.size());
  state.counters["plans"] = static_cast<double>(s.plans.size());
}
BENCHMARK(BM_Part_BuildStepProgram)->Unit(benchmark::kMillisecond);

void BM_Part_Simulate(benchmark::State& state) {
  const SearchPlansOf70b& s = Plans70b();
  const CostModel cost(s.profile);
  SimulationOptions options;
  options.track_memory = false;  // as EvaluatePlan
  for (auto _ : state)
    for (const StepProgram& program : s.programs)
      benchmark::DoNotOptimize(Simulate(program, cost, options).step_seconds);
}
BENCHMARK(BM_Part_Simulate)->Unit(benchmark::kMillisecond);

void BM_Part_ReplayMemory(benchmark::State& state) {
  const SearchPlansOf70b& s = Plans70b();
  for (auto _ : state)
    for (const StepProgram& program : s.programs) benchmark::DoNotOptimize(ReplayMemory(program).peak);
}
BENCHMARK(BM_Part_ReplayMemory)->Unit(benchmark::kMillisecond);

// Only the plans whose allocated bytes leave them a chance (the others skip it).
void BM_Part_ReplayAllocator(benchmark::State& state) {
  const SearchPlansOf70b& s = Plans70b();
  int replayed = 0;
  for (auto _ : state) {
    replayed = 0;
    for (size_t i = 0; i < s.plans.size(); ++i) {
      const ReservedMemory r = ReplayAllocatorIfItCanFit(s.plans[i], s.profile, s.programs[i], s.memories[i]);
      replayed += r.segments > 0;
      benchmark::DoNotOptimize(r.peak_reserved);
    }
  }
  state.counters["replayed"] = replayed;
}
BENCHMARK(BM_Part_ReplayAllocator)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace llmplan

BENCHMARK_MAIN();
