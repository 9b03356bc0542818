#include "feedback/comparison_format.h"

#include <cmath>
#include <cstdio>

#include "base/format.h"

namespace llmplan {

namespace {

std::string Printf(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

SummaryRow Row(const std::string& label, const ComparedValue& v, std::string (*format)(double)) {
  return {label, format(v.predicted), format(v.measured), v.error()};
}

std::string Seconds(double s) { return FormatSeconds(s); }
std::string Bytes(double b) { return FormatBytes(b); }
std::string Rate(double r) { return Printf("%.0f", r); }
std::string Percent(double x) { return Printf("%.1f%%", 100 * x); }

}  // namespace

std::string FormatError(double error) {
  if (!std::isfinite(error)) return "n/a";
  return Printf("%+.1f%%", 100 * error);
}

std::vector<SummaryRow> StepRows(const Comparison& c) {
  return {Row("step time", c.step_time_s, Seconds), Row("device step", c.device_step_s, Seconds),
          Row("exposed communication", c.exposed_communication_s, Seconds),
          Row("tokens/s/GPU", c.tokens_per_s_per_gpu, Rate), Row("MFU", c.mfu, Percent)};
}

std::vector<SummaryRow> MemoryRows(const Comparison& c) {
  return {Row("peak allocated", c.peak_allocated_bytes, Bytes), Row("peak reserved", c.peak_reserved_bytes, Bytes)};
}

std::string DescribeMemorySource(const std::string& memory_source) {
  if (memory_source == "cuda_caching_allocator") return "the CUDA caching allocator's statistics";
  if (memory_source == "cpu_tensor_bytes") return "the bytes of LibTorch's CPU tensors (reserved = allocated)";
  if (memory_source == "process_peak_rss")
    return "the process's peak resident memory (RSS), not tensor bytes: this LibTorch counts none on the CPU";
  return "'" + memory_source + "' (unknown to this llmplan)";
}

std::string DescribePlan(const Comparison& c) {
  const Plan& p = c.plan;
  return p.model.name + " on " + std::to_string(p.gpus) + " x " + c.profile + ": " + StrategyName(p.strategy) +
         ", micro-batch " + std::to_string(p.micro_batch) + " x grad-accum " + std::to_string(p.grad_accum) + ", " +
         std::to_string(p.checkpoint_layers.size()) + " of " + std::to_string(p.model.layers) +
         " blocks checkpointed, offload " + OffloadName(p.offload);
}

}  // namespace llmplan
