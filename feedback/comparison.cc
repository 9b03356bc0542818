#include "feedback/comparison.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "feedback/stream_use.h"
#include "planner/cost_model.h"

namespace llmplan {

namespace {

// The classes, in the order reports list them: compute by phase, then
// communication by kind, then the step's end, then offload.
enum OpClass {
  kForwardBlocks,
  kBackwardBlocks,
  kRecompute,
  kHeadForward,
  kHeadBackward,
  kEmbedding,
  kAllGather,
  kReduceScatter,
  kGradAllReduce,
  kGradNormAllReduce,
  kLossAllReduce,
  kGradSums,
  kNormAndClip,
  kGpuOptimizer,
  kCpuOptimizer,
  kCopyToDevice,
  kCopyToHost,
  kNumOpClasses,
};
constexpr std::array<const char*, kNumOpClasses> kOpClassNames = {
    "forward_blocks", "backward_blocks", "recompute",       "head_forward_loss",    "head_backward",   "embedding",
    "all_gather",     "reduce_scatter",  "grad_all_reduce", "grad_norm_all_reduce", "loss_all_reduce", "grad_sums",
    "norm_and_clip",  "gpu_optimizer",   "cpu_optimizer",   "copy_to_device",       "copy_to_host"};

// -1 for releases: they take no time on either side.
int ClassOf(const StepOp& op, const StepProgram& program) {
  auto unit_kind = [&] { return program.units.at(op.unit).kind; };
  switch (op.kind) {
    case OpKind::kForward:
      if (unit_kind() == UnitKind::kEmbedding) return kEmbedding;
      return unit_kind() == UnitKind::kHead ? kHeadForward : kForwardBlocks;
    case OpKind::kBackward:
      if (unit_kind() == UnitKind::kEmbedding) return kEmbedding;
      return unit_kind() == UnitKind::kHead ? kHeadBackward : kBackwardBlocks;
    case OpKind::kRecompute: return kRecompute;
    case OpKind::kAllGather: return kAllGather;
    case OpKind::kReduceScatter: return kReduceScatter;
    case OpKind::kAllReduce: return kGradAllReduce;
    case OpKind::kAllReduceGradNorm: return kGradNormAllReduce;
    case OpKind::kAllReduceLoss: return kLossAllReduce;
    case OpKind::kAccumulateShard:
    case OpKind::kLocalReduce: return kGradSums;
    case OpKind::kGradNorm:
    case OpKind::kClipGradients: return kNormAndClip;
    case OpKind::kOptimizerStep: return kGpuOptimizer;
    case OpKind::kCpuOptimizerStep: return kCpuOptimizer;
    case OpKind::kCopyParamsToDevice:
    case OpKind::kCopyParamsForGather:
    case OpKind::kCopyMasterToDevice: return kCopyToDevice;
    case OpKind::kCopyGradsToHost:
    case OpKind::kCopyMasterToHost: return kCopyToHost;
    case OpKind::kRelease: return -1;
  }
  return -1;
}

nlohmann::json ErrorJson(double error) { return std::isfinite(error) ? nlohmann::json(error) : nlohmann::json(); }

nlohmann::json ValueJson(const ComparedValue& v) {
  return {{"predicted", v.predicted}, {"measured", v.measured}, {"error", ErrorJson(v.error())}};
}

}  // namespace

double RelativeError(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? 0 : std::numeric_limits<double>::quiet_NaN();
  return (predicted - measured) / measured;
}

Comparison Compare(const MeasuredRun& run, const Evaluation& predicted, const HardwareProfile& profile) {
  const StepProgram& program = predicted.program;
  CheckSameProgram(run, program);
  const SimulationResult& sim = predicted.simulation;
  const Estimate& e = predicted.estimate;
  const std::vector<const MeasuredStep*> timed = run.TimedSteps();
  const double n_timed = static_cast<double>(timed.size());

  Comparison c;
  c.plan = e.plan;
  c.profile = profile.name;
  c.run_dir = run.dir;
  c.device = run.device;
  c.memory_source = timed.back()->memory_source;
  c.steps = static_cast<int>(run.steps.size());
  c.timed_steps = static_cast<int>(timed.size());
  for (const MeasuredStep& s : run.steps)
    if (s.kernel_traced) c.kernel_traced_step = s.step;

  // Per class: the simulated span of each op beside its measured mean.
  const CostModel cost(profile);
  std::array<OpClassComparison, kNumOpClasses> classes;
  for (const StepOp& op : program.ops) {
    const int k = ClassOf(op, program);
    if (k < 0) continue;
    OpClassComparison& cls = classes[k];
    const double simulated = sim.ops[op.id].end - sim.ops[op.id].start;
    ++cls.ops;
    cls.seconds.predicted += simulated;
    cls.seconds.measured += run.MeanSeconds(op.id);
    if (!CostModel::PricedAsCompute(op)) continue;
    const ComputeTerms terms = cost.ComputeTermSeconds(op.work);
    cls.has_split = true;
    cls.split.gemm_s += terms.gemm;
    cls.split.attention_s += terms.attention;
    cls.split.memory_bound_s += terms.memory_bound;
    cls.split.kernel_overhead_s += terms.kernel_overhead;
    cls.split.launch_wait_s += terms.Seconds() - terms.DeviceSeconds();
    // Never below zero: a span is its cost stretched by contention, up to
    // the rounding of the simulator's clock.
    cls.split.contention_s += std::max(0.0, simulated - terms.Seconds());
  }
  for (int k = 0; k < kNumOpClasses; ++k) {
    if (classes[k].ops == 0) continue;
    classes[k].name = kOpClassNames[k];
    c.classes.push_back(classes[k]);
  }

  // The device's step, its compute stream's idle time and what communication
  // added to it, measured per timed step and averaged.
  double makespan = 0, compute_idle = 0, exposed = 0;
  for (const MeasuredStep* step : timed) {
    const StreamUse use = MeasureStreamUse(program, step->Spans());
    makespan += step->OpsMakespan();
    compute_idle += std::max(0.0, step->OpsMakespan() - use.compute_busy);
    exposed += use.exposed_communication;
  }
  OpClassComparison idle;
  idle.name = "compute_idle";
  idle.seconds = {std::max(0.0, sim.step_seconds - sim.busy_seconds[static_cast<int>(StreamKind::kCompute)]),
                  compute_idle / n_timed};
  c.classes.push_back(idle);
  c.device_step_s = {sim.step_seconds, makespan / n_timed};
  c.exposed_communication_s = {sim.exposed_communication_seconds, exposed / n_timed};

  double step_s = 0, tokens_per_s = 0;
  for (const MeasuredStep* step : timed) {
    step_s += step->step_s;
    tokens_per_s += step->tokens_per_s_per_gpu;
  }
  c.step_time_s = {e.time.step_seconds, step_s / n_timed};
  c.tokens_per_s_per_gpu = {e.tokens_per_second_per_gpu, tokens_per_s / n_timed};
  // The run's own MFU used the plan's profile; recomputed on `profile` so
  // both sides share one peak.
  const double flops_per_token = e.plan.model.ModelFlopsPerToken(e.plan.seq_len);
  c.mfu = {e.mfu, profile.bf16_peak_flops > 0
                      ? c.tokens_per_s_per_gpu.measured * flops_per_token / profile.bf16_peak_flops
                      : 0};

  // Memory: the highest over the timed steps, and the op it was reached in.
  c.peak_allocated_bytes.predicted = e.memory.peak_allocated_bytes;
  c.peak_reserved_bytes.predicted = e.memory.peak_reserved_bytes;
  for (const MeasuredStep* step : timed) {
    c.peak_allocated_bytes.measured = std::max(c.peak_allocated_bytes.measured, step->peak_allocated);
    c.peak_reserved_bytes.measured = std::max(c.peak_reserved_bytes.measured, step->peak_reserved);
    for (size_t i = 0; i < step->ops.size(); ++i) {
      if (step->ops[i].peak_allocated <= c.measured_peak.bytes) continue;
      c.measured_peak.op = static_cast<int>(i);
      c.measured_peak.bytes = step->ops[i].peak_allocated;
    }
  }
  if (c.measured_peak.op >= 0) c.measured_peak.name = program.ops[c.measured_peak.op].name;
  c.predicted_peak.op = predicted.memory.peak_op;
  c.predicted_peak.bytes = predicted.memory.peak;
  if (c.predicted_peak.op >= 0) c.predicted_peak.name = program.ops[c.predicted_peak.op].name;

  c.predicted_allocated = predicted.memory.after_op;
  const MeasuredStep& representative = *timed.back();
  c.representative_step = representative.step;
  for (const MeasuredOp& op : representative.ops) c.measured_allocated.push_back(op.allocated);
  for (const MeasuredStep& step : run.steps) c.losses.emplace_back(step.step, step.loss);
  return c;
}

nlohmann::json ComparisonToJson(const Comparison& c) {
  nlohmann::json classes = nlohmann::json::array();
  for (const OpClassComparison& k : c.classes) {
    nlohmann::json j = {{"name", k.name},
                        {"ops", k.ops},
                        {"predicted_s", k.seconds.predicted},
                        {"measured_s", k.seconds.measured},
                        {"error", ErrorJson(k.seconds.error())}};
    if (k.has_split)
      j["predicted_split"] = {{"gemm_s", k.split.gemm_s},
                              {"attention_s", k.split.attention_s},
                              {"memory_bound_s", k.split.memory_bound_s},
                              {"kernel_overhead_s", k.split.kernel_overhead_s},
                              {"launch_wait_s", k.split.launch_wait_s},
                              {"contention_s", k.split.contention_s}};
    classes.push_back(std::move(j));
  }
  return {{"run",
           {{"dir", c.run_dir},
            {"device", c.device},
            {"steps", c.steps},
            {"timed_steps", c.timed_steps},
            {"kernel_traced_step", c.kernel_traced_step},
            {"memory_source", c.memory_source}}},
          {"profile", c.profile},
          {"model", c.plan.model.name},
          {"gpus", c.plan.gpus},
          {"step_time_s", ValueJson(c.step_time_s)},
          {"device_step_s", ValueJson(c.device_step_s)},
          {"exposed_communication_s", ValueJson(c.exposed_communication_s)},
          {"tokens_per_s_per_gpu", ValueJson(c.tokens_per_s_per_gpu)},
          {"mfu", ValueJson(c.mfu)},
          {"peak_allocated_bytes", ValueJson(c.peak_allocated_bytes)},
          {"peak_reserved_bytes", ValueJson(c.peak_reserved_bytes)},
          {"peak_op", {{"predicted", c.predicted_peak.name}, {"measured", c.measured_peak.name}}},
          {"classes", std::move(classes)}};
}

}  // namespace llmplan
