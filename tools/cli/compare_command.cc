// llmplan compare: a run held against its prediction. The prediction is the
// run's plan (or --plan, which must build the same step program) evaluated on
// its profile (or --gpu); the measurement is the run directory `llmplan run
// --out` wrote. Prints step time, device step, exposed communication,
// throughput and memory peaks (and the op each peak was reached in), then the
// device seconds per class of ops — each predicted, measured and the error
// (predicted - measured) / measured. Measured times are means over the timed
// steps (all but the warm-up and a kernel-traced step); measured peaks the
// highest over them.
//
// --json prints this object (errors are fractions; null where the measured
// value is 0 and the predicted one is not):
//   {
//     "run": {"dir", "device", "steps", "timed_steps", "kernel_traced_step" (0: none), "memory_source"},
//     "profile": NAME, "model": NAME, "gpus": N,
//     "step_time_s":             {"predicted", "measured", "error"},  step, data loading included
//     "device_step_s":           {...},  the program's makespan
//     "exposed_communication_s": {...},  collectives/copies running while compute is not
//     "tokens_per_s_per_gpu":    {...},
//     "mfu":                     {...},  both on the profile's bf16 peak
//     "peak_allocated_bytes":    {...},
//     "peak_reserved_bytes":     {...},
//     "peak_op": {"predicted": OP NAME, "measured": OP NAME},  "" if none
//     "classes": [{"name", "ops", "predicted_s", "measured_s", "error",
//                  "predicted_split": {"gemm_s", "attention_s", "memory_bound_s",
//                                      "kernel_overhead_s", "launch_wait_s",
//                                      "contention_s"}   (compute classes only)}]
//   }
// Class names: forward_blocks, backward_blocks, recompute, head_forward_loss,
// head_backward, embedding, all_gather, reduce_scatter, grad_all_reduce,
// grad_norm_all_reduce, loss_all_reduce, grad_sums, norm_and_clip,
// gpu_optimizer, cpu_optimizer, copy_to_device, copy_to_host (those the
// program has), then compute_idle.
//
// --report FILE.html writes a self-contained page with charts
// (feedback/report_html.h); --trace FILE.json the predicted and the last timed
// measured step side by side for Perfetto (feedback/compare_trace.h).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "feedback/compare_trace.h"
#include "feedback/comparison.h"
#include "feedback/comparison_format.h"
#include "feedback/measured_run.h"
#include "feedback/report_html.h"
#include "simulator/evaluate.h"
#include "tools/cli/commands.h"

namespace llmplan::cli {

namespace {

struct CompareOptions {
  std::string run, plan, gpu, report, trace;
  bool json = false;
};

std::string Row(const std::string& label, const std::string& predicted, const std::string& measured,
                const std::string& error, const std::string& rest = "") {
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-22s %12s %12s %9s%s\n", label.c_str(), predicted.c_str(), measured.c_str(),
                error.c_str(), rest.c_str());
  return buf;
}

std::string Header(const std::string& title, const std::string& rest = "") {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-24s %12s %12s %9s%s\n", title.c_str(), "predicted", "measured", "error",
                rest.c_str());
  return buf;
}

void PrintText(std::ostream& out, const Comparison& c) {
  out << "llmplan compare: " << DescribePlan(c) << "\n";
  out << "run " << c.run_dir << " (" << (c.device.empty() ? "?" : c.device) << "): " << c.steps << " steps, "
      << c.timed_steps << " timed"
      << (c.kernel_traced_step > 0 ? " (step " + std::to_string(c.kernel_traced_step) + " kernel-traced, left out)" : "")
      << "; error = (predicted - measured) / measured\n";

  out << "\n" << Header("Step");
  for (const SummaryRow& r : StepRows(c)) out << Row(r.label, r.predicted, r.measured, FormatError(r.error));

  out << "\n" << Header("Memory");
  for (const SummaryRow& r : MemoryRows(c)) out << Row(r.label, r.predicted, r.measured, FormatError(r.error));
  out << "  peak reached during    predicted \"" << c.predicted_peak.name << "\", measured \"" << c.measured_peak.name
      << "\"" << (c.predicted_peak.op == c.measured_peak.op ? " (same op)" : "") << "\n";
  out << "  measured memory is " << DescribeMemorySource(c.memory_source) << "\n";

  out << "\n" << Header("Device time by class", "   predicted GEMM / attention / memory-bound / overhead");
  for (const OpClassComparison& k : c.classes) {
    std::string split;
    if (k.has_split) {
      const PredictedSplit& s = k.split;
      split = "   " + FormatSeconds(s.gemm_s) + " / " + FormatSeconds(s.attention_s) + " / " +
              FormatSeconds(s.memory_bound_s) + " / " +
              FormatSeconds(s.kernel_overhead_s + s.launch_wait_s + s.contention_s);
    }
    out << Row(k.name, FormatSeconds(k.seconds.predicted), FormatSeconds(k.seconds.measured),
               FormatError(k.seconds.error()), split);
  }
  out << "  (the split is the cost model's terms; the executor times whole ops, so the measured split is not\n"
         "  observed. overhead = time per kernel + waiting for launches + slowdown beside collectives)\n";
}

void Run(const CompareOptions& o) {
  const MeasuredRun run = LoadMeasuredRun(o.run);
  const Plan plan = o.plan.empty() ? run.plan : LoadPlan(o.plan);
  const HardwareProfile profile = LoadHardwareProfile(o.gpu.empty() ? plan.profile : o.gpu);
  const Evaluation predicted = EvaluatePlanInDetail(plan, profile, /*record_timeline=*/!o.trace.empty());
  const Comparison c = Compare(run, predicted, profile);
  if (!o.report.empty()) WriteComparisonReport(c, o.report);
  if (!o.trace.empty()) SideBySideTrace(predicted, *run.TimedSteps().back()).Write(o.trace);
  if (o.json) {
    std::cout << ComparisonToJson(c).dump(2) << "\n";
    return;
  }
  PrintText(std::cout, c);
  if (!o.report.empty()) std::cout << "report written to " << o.report << "\n";
  if (!o.trace.empty())
    std::cout << "trace written to " << o.trace << " (predicted and measured; open in ui.perfetto.dev)\n";
}

}  // namespace

void AddCompareCommand(CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand("compare", "Compare a run with its prediction, op class by op class");
  cmd->add_option("--run", o->run, "Run directory written by llmplan run --out")->required();
  cmd->add_option("--plan", o->plan, "Plan to predict with (default: the run's plan.json)");
  cmd->add_option("--gpu", o->gpu, "Hardware profile to predict on (default: the plan's)");
  cmd->add_flag("--json", o->json, "Print JSON instead of text");
  cmd->add_option("--report", o->report, "Write a self-contained HTML report with charts here");
  cmd->add_option("--trace", o->trace, "Write the predicted and measured step as one Perfetto trace here");
  cmd->callback([o] { Run(*o); });
}

}  // namespace llmplan::cli
