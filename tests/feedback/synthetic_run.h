// Synthetic run directories for the feedback tests: what `llmplan run` would
// have written (executor/run/metrics.h's format) had the hardware behaved exactly
// as a given profile's simulation of a program — so a fit from them has a
// known right answer.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/memory_timeline.h"
#include "planner/plan.h"
#include "planner/step_program.h"
#include "simulator/evaluate.h"

namespace llmplan::testing {

// A plan of a preset model on h200-sxm, everything else pinned.
inline Plan PresetPlan(const std::string& model, int gpus, ShardingStrategy strategy, int64_t micro_batch, int64_t seq,
                       int64_t grad_accum, std::vector<int> checkpoint = {}, Offload offload = Offload::kNone) {
  Plan p;
  p.model = PresetModel(model);
  p.profile = "h200-sxm";
  p.gpus = gpus;
  p.strategy = strategy;
  p.shard_group_size = 0;
  NormaliseGrouping(p);
  p.micro_batch = micro_batch;
  p.seq_len = seq;
  p.grad_accum = grad_accum;
  p.checkpoint_layers = std::move(checkpoint);
  p.offload = offload;
  p.Validate();
  return p;
}

struct SyntheticTimes {
  std::vector<OpTiming> spans;  // by op id, seconds since the step's start
  std::vector<double> issued;   // host clock after each op's issue
  double step_s = 0;
};

// The spans the simulator gives `program` on `truth`, the host's clock after
// each op's issue, and the step time with the profile's step overhead.
inline SyntheticTimes SimulatedTimes(const StepProgram& program, const HardwareProfile& truth) {
  const CostModel cost(truth);
  const SimulationResult sim = Simulate(program, cost);
  SyntheticTimes t;
  t.spans = sim.ops;
  for (const StepOp& op : program.ops) t.issued.push_back(sim.ops[op.id].issued + cost.IssueSeconds(op));
  t.step_s = sim.step_seconds + truth.step_overhead_s;
  return t;
}

struct SyntheticRunOptions {
  int steps = 3;
  double first_step_factor = 1.5;  // the first (warm-up) step is this much slower: calibration must skip it
  double memory_factor = 1.0;      // measured peak memory = the plan's predicted peaks x this
  std::string device = "cuda:0";   // summary.json's device; empty: no summary.json
  int kernel_traced_step = 0;      // this step (from 1) ran under the profiler: marked, and this much slower
  double kernel_traced_factor = 1.75;
};

// Writes plan.json, program.json, op_times.jsonl, metrics.jsonl (and
// summary.json) into `dir` for `steps` steps with the times `t`.
inline void WriteSyntheticRun(const std::string& dir, const Plan& plan, const StepProgram& program,
                              const SyntheticTimes& t, const SyntheticRunOptions& o = {}) {
  std::filesystem::create_directories(dir);
  SavePlan(plan, dir + "/plan.json");
  std::ofstream(dir + "/program.json") << StepProgramJson(program).dump();

  // Memory as the plan's own profile predicts it (memory does not depend on
  // the time terms a test changes).
  const HardwareProfile profile = LoadHardwareProfile(plan.profile);
  const MemoryTimeline memory = ReplayMemory(program);
  const SimulationResult sim = Simulate(program, CostModel(profile));
  const Estimate predicted = EstimateFromSimulation(plan, profile, program, sim, memory,
                                                    ReplayAllocatorIfItCanFit(plan, profile, program, memory));
  std::ofstream times(dir + "/op_times.jsonl"), metrics(dir + "/metrics.jsonl");
  for (int step = 1; step <= o.steps; ++step) {
    const bool traced = step == o.kernel_traced_step;
    const double f = step == 1 ? o.first_step_factor : (traced ? o.kernel_traced_factor : 1.0);
    std::vector<double> start, end, issued, allocated, reserved;
    for (const StepOp& op : program.ops) {
      start.push_back(f * t.spans[op.id].start);
      end.push_back(f * t.spans[op.id].end);
      issued.push_back(f * t.issued[op.id]);
      allocated.push_back(o.memory_factor * memory.after_op[op.id]);
      reserved.push_back(o.memory_factor * memory.after_op[op.id]);
    }
    times << nlohmann::json{{"step", step},
                            {"start_s", start},
                            {"end_s", end},
                            {"issued_s", issued},
                            {"allocated", allocated},
                            {"reserved", reserved},
                            {"peak_allocated", allocated},
                            {"peak_reserved", reserved},
                            {"memory_source", "cuda_caching_allocator"}}
                 .dump()
          << "\n";
    metrics << nlohmann::json{{"step", step},
                              {"loss", 5.0},
                              {"step_s", f * t.step_s},
                              {"kernel_traced", traced},
                              {"peak_allocated_bytes", o.memory_factor * predicted.memory.peak_allocated_bytes},
                              {"peak_reserved_bytes", o.memory_factor * predicted.memory.peak_reserved_bytes}}
                   .dump()
            << "\n";
  }
  if (!o.device.empty()) std::ofstream(dir + "/summary.json") << nlohmann::json{{"device", o.device}}.dump();
}

}  // namespace llmplan::testing
