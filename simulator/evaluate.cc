#include "simulator/evaluate.h"

#include <algorithm>
#include <cstdio>

#include "base/user_error.h"
#include "planner/memory_model.h"
#include "planner/nvme_offload.h"
#include "planner/program_builder.h"

namespace llmplan {

double HostCapacityPerGpu(const Plan& plan, const HardwareProfile& profile) {
  if (plan.host_memory_per_node_bytes > 0) return plan.host_memory_per_node_bytes / plan.GpusOnNode();
  return profile.host_memory_bytes;
}

ReservedMemory ReplayAllocatorIfItCanFit(const Plan& plan, const HardwareProfile& profile, const StepProgram& program,
                                         const MemoryTimeline& memory) {
  if (profile.device_kind != "cuda") return {};
  // Reserved is at least allocated: a plan whose allocated bytes alone do not
  // fit needs no replay to be refused (most of a search's hopeless plans).
  const double at_least = memory.peak + program.persistent.cuda_context + program.persistent.collective_buffers;
  if (at_least * (1 + profile.memory_margin_fraction) > profile.memory_bytes * profile.usable_fraction) return {};
  return ReplayAllocator(plan, program, AllocatorCapacity(profile, program));
}

double AllocatorCapacity(const HardwareProfile& profile, const StepProgram& program) {
  return std::max(0.0, profile.memory_bytes - program.persistent.cuda_context - program.persistent.collective_buffers);
}

// "0.4%", "12%": a margin of a few tenths of a percent must not read "0%".
static std::string MarginPercent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, fraction < 0.1 ? "%.1f%%" : "%.0f%%", 100 * fraction);
  return text;
}

Estimate EstimateFromSimulation(const Plan& plan, const HardwareProfile& profile, const StepProgram& program,
                                const SimulationResult& sim, const MemoryTimeline& memory,
                                const ReservedMemory& reserved) {
  Estimate e;
  e.plan = plan;
  const PersistentMemory& pm = program.persistent;
  MemoryEstimate& m = e.memory;
  auto& b = m.breakdown;
  // Terms the caching allocator sees, in the order a reader wants them.
  b = {{"param_shards", pm.param_shards},
       {"grad_shards", pm.grad_shards},
       {"optimizer_state", pm.optimizer_state},
       {"compute_params", pm.compute_params},
       {"workspaces", pm.workspaces},
       {"step_inputs", pm.step_inputs}};
  if (pm.graph_workspaces > 0) b.emplace_back("graph_workspaces", pm.graph_workspaces);
  for (int c = 0; c < kNumMemoryCategories; ++c)
    b.emplace_back(MemoryCategoryName(static_cast<MemoryCategory>(c)), memory.at_peak[c]);
  double allocated = 0;
  for (const auto& [name, bytes] : b) allocated += bytes;
  m.peak_allocated_bytes = allocated;
  // Reserved: the caching allocator's segments at their most (the allocator
  // replay); a CPU has no cache.
  const bool cuda = profile.device_kind == "cuda";
  m.peak_reserved_bytes = cuda ? std::max(reserved.peak_reserved, allocated) : allocated;
  b.emplace_back("allocator_cache", m.peak_reserved_bytes - allocated);
  b.emplace_back("cuda_context", pm.cuda_context);
  b.emplace_back("collective_buffers", pm.collective_buffers);
  m.device_peak_bytes = m.peak_reserved_bytes + pm.cuda_context + pm.collective_buffers;
  m.capacity_bytes = profile.memory_bytes * profile.usable_fraction;
  m.margin_fraction = profile.memory_margin_fraction;
  m.host_breakdown = {{"master_params", program.host.master_params},
                      {"optimizer_state", program.host.optimizer_state},
                      {"grad_staging", program.host.grad_staging},
                      {"param_staging", program.host.param_staging},
                      {"checkpoint_staging", program.host.checkpoint_staging},
                      {"nvme_staging", program.host.nvme_staging}};
  m.nvme_bytes = program.host.nvme_state;
  m.host_bytes = program.host.Total();
  m.host_capacity_bytes = HostCapacityPerGpu(plan, profile);

  e.fits = true;
  // The plan must fit with calibration's measured error to spare.
  const double needed = m.device_peak_bytes * (1 + m.margin_fraction);
  if (needed > m.capacity_bytes) {
    e.fits = false;
    auto largest = *std::max_element(b.begin(), b.end(), [](auto& x, auto& y) { return x.second < y.second; });
    e.why_not = "device memory " + FormatBytes(m.device_peak_bytes) +
                (m.margin_fraction > 0 ? " (+" + MarginPercent(m.margin_fraction) + " calibrated margin)" : "") +
                " exceeds " + FormatBytes(m.capacity_bytes) + " by " + FormatBytes(needed - m.capacity_bytes) +
                " (largest term: " + largest.first + " " + FormatBytes(largest.second) + ")";
  } else if (cuda && (reserved.retries > 0 || reserved.out_of_memory)) {
    // Near the edge the allocator frees its whole cache and retries: a
    // device-wide synchronisation each time, or out of memory.
    e.fits = false;
    e.why_not = reserved.out_of_memory
                    ? "the caching allocator runs out of memory even after freeing its cache"
                    : "the caching allocator would free its cache and retry every step (a device-wide stall each time)";
  } else if (m.host_bytes > m.host_capacity_bytes) {
    e.fits = false;
    e.why_not = "host memory " + FormatBytes(m.host_bytes) + " per GPU exceeds " + FormatBytes(m.host_capacity_bytes) +
                " by " + FormatBytes(m.host_bytes - m.host_capacity_bytes);
  }

  // Time: compute seconds by kind (as simulated, contention included), then
  // what the other streams added to the critical path.
  double fwd = 0, bwd = 0, recompute = 0, opt = 0;
  for (const auto& op : program.ops) {
    double d = sim.ops[op.id].end - sim.ops[op.id].start;
    switch (op.kind) {
      case OpKind::kForward: fwd += d; break;
      case OpKind::kBackward:
      case OpKind::kAccumulateShard:
      case OpKind::kLocalReduce: bwd += d; break;
      case OpKind::kRecompute: recompute += d; break;
      case OpKind::kGradNorm:
      case OpKind::kClipGradients:
      case OpKind::kOptimizerStep: opt += d; break;
      default: break;
    }
  }
  TimeEstimate& t = e.time;
  // The program's makespan plus what the host does each step outside it.
  t.step_seconds = sim.step_seconds + profile.step_overhead_s;
  double compute_busy = sim.busy_seconds[static_cast<int>(StreamKind::kCompute)];
  t.breakdown = {{"forward", fwd},
                 {"backward", bwd},
                 {"recompute", recompute},
                 {"optimizer", opt},
                 {"exposed_communication", sim.exposed_communication_seconds},
                 {"other_idle", std::max(0.0, sim.step_seconds - compute_busy - sim.exposed_communication_seconds)},
                 {"host_overhead", profile.step_overhead_s}};
  for (int s = 0; s < kNumStreams; ++s)
    t.stream_busy.emplace_back(StreamName(static_cast<StreamKind>(s)), sim.busy_seconds[s]);

  double tokens = static_cast<double>(plan.micro_batch * plan.seq_len * plan.grad_accum);
  e.tokens_per_second_per_gpu = t.step_seconds > 0 ? tokens / t.step_seconds : 0;
  e.mfu = e.tokens_per_second_per_gpu * plan.model.ModelFlopsPerToken(plan.seq_len) / profile.bf16_peak_flops;
  e.hfu = e.tokens_per_second_per_gpu * HardwareFlopsPerToken(plan) / profile.bf16_peak_flops;

  // NVMe offload: refused when the disk, not the GPUs, sets the pace
  // (planner/nvme_offload.h, kNvmeMaxStepFraction).
  for (const auto& op : program.ops)
    if (op.kind == OpKind::kCpuOptimizerStep && op.work.nvme_bytes > 0)
      t.nvme_seconds += NvmeStreamSeconds(op.work.nvme_bytes / 8, op.work.host_sharers, profile);
  if (e.fits && t.nvme_seconds > kNvmeMaxStepFraction * t.step_seconds) {
    e.fits = false;
    char share[32];
    std::snprintf(share, sizeof share, "%.0f%%", 100 * t.nvme_seconds / t.step_seconds);
    e.why_not = "the disk is too slow for the step: streaming AdamW's state (" + FormatBytes(m.nvme_bytes) +
                " per GPU, read and written) takes " + FormatSeconds(t.nvme_seconds) + " of the " +
                FormatSeconds(t.step_seconds) + " step (" + share + ", the most is " +
                std::to_string(static_cast<int>(100 * kNvmeMaxStepFraction)) +
                "%); more gradient accumulation, more GPUs or a faster disk";
  }
  return e;
}

StepProgram BuildEvaluatedProgram(const Plan& plan, const HardwareProfile& profile, const EvaluateOptions& evaluate,
                                  bool op_names) {
  if (plan.OptimizerStateOnNvme() && !HasNvmeRates(profile))
    throw UserError("profile " + profile.name + " has no NVMe read/write rates, so AdamW state offloaded to NVMe "
                    "cannot be priced: measure them on the machine (llmplan profile --nvme-dir DIR)");
  StepProgram program = BuildStepProgram(plan, profile, op_names);
  if (evaluate.ckpt_async) program.host.checkpoint_staging = CheckpointStagingBytesPerGpu(plan, program);
  return program;
}

Evaluation EvaluatePlanInDetail(const Plan& plan, const HardwareProfile& profile, bool record_timeline,
                                const EvaluateOptions& evaluate) {
  Evaluation ev;
  ev.program = BuildEvaluatedProgram(plan, profile, evaluate);
  CostModel cost(profile);
  SimulationOptions options;
  options.record_timeline = record_timeline;
  ev.simulation = Simulate(ev.program, cost, options);
  ev.memory = ReplayMemory(ev.program);
  ev.reserved = ReplayAllocatorIfItCanFit(plan, profile, ev.program, ev.memory);
  ev.estimate = EstimateFromSimulation(plan, profile, ev.program, ev.simulation, ev.memory, ev.reserved);
  return ev;
}

Estimate EvaluatePlan(const Plan& plan, const HardwareProfile& profile, const EvaluateOptions& evaluate) {
  // Only the Estimate leaves: no op is named.
  return EvaluateProgram(plan, profile, BuildEvaluatedProgram(plan, profile, evaluate, /*op_names=*/false));
}

Estimate EvaluateProgram(const Plan& plan, const HardwareProfile& profile, const StepProgram& program) {
  CostModel cost(profile);
  SimulationOptions options;
  options.track_memory = false;  // the Estimate's memory comes from ReplayMemory
  SimulationResult sim = Simulate(program, cost, options);
  const MemoryTimeline memory = ReplayMemory(program);
  const ReservedMemory reserved = ReplayAllocatorIfItCanFit(plan, profile, program, memory);
  return EstimateFromSimulation(plan, profile, program, sim, memory, reserved);
}

}  // namespace llmplan
