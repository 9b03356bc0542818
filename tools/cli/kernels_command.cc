// llmplan kernels: where a step's device time went, kernel by kernel, from
// Kineto Chrome traces — the one `llmplan run --kernel-trace STEP` writes
// (RUN_DIR/kernel_trace.json) or one torch.profiler exported (a PyTorch
// peer's step, e.g. tools/device/fsdp2_reference.py --kernel-trace), summed
// up by the same rules (feedback/kernel_profile.h).
//
//   llmplan kernels TRACE [TRACE...] [--top N] [--json]
//
// One trace: device span, busy and idle time (kernel turnaround and waits),
// time per kernel class, the N most expensive kernels. Several: their
// classes side by side, each column one trace, then each trace's most
// expensive kernels.
// --json prints [KernelProfileJson, ...] in the traces' order.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "feedback/kernel_profile.h"
#include "tools/cli/commands.h"

namespace llmplan::cli {

namespace {

struct KernelsOptions {
  std::vector<std::string> traces;
  int top = 15;
  bool json = false;
};

void PrintSideBySide(const std::vector<std::string>& names, const std::vector<KernelProfile>& profiles) {
  auto row = [&](const std::string& label, auto value) {
    std::printf("  %-18s", label.c_str());
    for (const KernelProfile& p : profiles) std::printf(" %14s", value(p).c_str());
    std::printf("\n");
  };
  auto ms = [](double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
    return std::string(buf);
  };
  std::printf("  %-18s", "");
  for (size_t i = 0; i < names.size(); ++i) std::printf(" %14s", ("[" + std::to_string(i + 1) + "]").c_str());
  std::printf("\n");
  row("device span", [&](const KernelProfile& p) { return ms(p.span_s); });
  row("busy", [&](const KernelProfile& p) { return ms(p.busy_s); });
  row("idle", [&](const KernelProfile& p) { return ms(p.idle_s()); });
  row("  turnaround", [&](const KernelProfile& p) { return ms(p.turnaround_idle_s); });
  row("  waits", [&](const KernelProfile& p) { return ms(p.wait_idle_s); });
  for (int c = 0; c < kKernelClasses; ++c) {
    bool any = false;
    for (const KernelProfile& p : profiles) any = any || p.classes[c].count > 0;
    if (!any) continue;
    row(KernelClassName(static_cast<KernelClass>(c)), [&](const KernelProfile& p) { return ms(p.classes[c].total_s); });
  }
  row("kernels", [&](const KernelProfile& p) { return std::to_string(p.events); });
  for (size_t i = 0; i < names.size(); ++i) std::printf("  [%zu] %s\n", i + 1, names[i].c_str());
}

void RunKernels(const KernelsOptions& o) {
  std::vector<KernelProfile> profiles;
  for (const std::string& path : o.traces) profiles.push_back(SummarizeKernels(ReadDeviceEvents(path)));
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (size_t i = 0; i < profiles.size(); ++i) {
      nlohmann::json p = KernelProfileJson(profiles[i], o.top);
      p["trace"] = o.traces[i];
      j.push_back(std::move(p));
    }
    std::cout << j.dump(1) << "\n";
    return;
  }
  if (profiles.size() > 1) {
    std::printf("llmplan kernels: %zu traces, device time by kernel class (time summed over kernels)\n",
                profiles.size());
    PrintSideBySide(o.traces, profiles);
  }
  for (size_t i = 0; i < profiles.size(); ++i) {
    std::cout << (profiles.size() > 1 ? "\n[" + std::to_string(i + 1) + "] " : "llmplan kernels: ") << o.traces[i]
              << "\n";
    PrintKernelProfile(std::cout, profiles[i], o.top);
  }
}

}  // namespace

void AddKernelsCommand(CLI::App& app) {
  auto options = std::make_shared<KernelsOptions>();
  CLI::App* kernels = app.add_subcommand(
      "kernels", "Device time of a traced step by kernel class (llmplan run --kernel-trace, torch.profiler)");
  kernels->add_option("traces", options->traces, "Chrome trace files (RUN_DIR/kernel_trace.json, ...)")->required();
  kernels->add_option("--top", options->top, "Most expensive kernels to list per trace (default 15)")
      ->check(CLI::Range(0, 100000));
  kernels->add_flag("--json", options->json, "Print the summaries as JSON");
  kernels->callback([options] { RunKernels(*options); });
}

}  // namespace llmplan::cli
