// llmplan simulate: interprets a plan's step program on virtual streams and
// reports step time, exposed communication, per-stream busy time and the
// memory peak; optionally writes a Chrome/Perfetto trace.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "planner/memory_timeline.h"
#include "base/user_error.h"
#include "simulator/evaluate.h"
#include "simulator/timeline_svg.h"
#include "simulator/trace.h"
#include "tools/cli/commands.h"
#include "tools/cli/report.h"

namespace llmplan::cli {

namespace {

struct SimulateOptions {
  std::string plan, gpu, trace, svg;
  bool json = false;
  bool ckpt_async = false;
};

void Run(const SimulateOptions& o) {
  Plan plan = LoadPlan(o.plan);
  HardwareProfile profile = LoadHardwareProfile(o.gpu.empty() ? plan.profile : o.gpu);
  EvaluateOptions evaluate;
  evaluate.ckpt_async = o.ckpt_async;
  Evaluation ev =
      EvaluatePlanInDetail(plan, profile, /*record_timeline=*/!o.trace.empty() || !o.svg.empty(), evaluate);
  const Estimate& e = ev.estimate;
  const PersistentMemory& pm = ev.program.persistent;
  const double persistent = AllocatorPersistentBytes(pm);
  if (!o.trace.empty()) PredictedTrace(ev.program, ev.simulation, persistent).Write(o.trace);
  if (!o.svg.empty()) {
    std::string title = plan.model.name + " on " + std::to_string(plan.gpus) + " x " + profile.name + ": " +
                        StrategyName(plan.strategy) + ", micro-batch " + std::to_string(plan.micro_batch) + " x " +
                        std::to_string(plan.grad_accum) + ", step " + FormatSeconds(e.time.step_seconds) +
                        " (predicted)";
    WriteFileAtomically(o.svg, TimelineSvg(ev.program, ev.simulation, persistent, title), "picture");
  }
  if (o.json) {
    nlohmann::json j = EstimateToJson(e, profile);
    j["simulation"] = {{"ops", ev.program.ops.size()},
                       {"exposed_communication_s", ev.simulation.exposed_communication_seconds},
                       {"peak_time_s", ev.simulation.peak_time},
                       {"peak_op", ev.memory.peak_op >= 0 ? ev.program.ops[ev.memory.peak_op].name : ""}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "llmplan simulate: " << plan.model.name << " on " << plan.gpus << " x " << profile.name << ", "
              << ev.program.ops.size() << " operations per step\n\n";
    PrintEstimate(std::cout, e, profile);
    if (ev.memory.peak_op >= 0)
      std::cout << "\nMemory peak at \"" << ev.program.ops[ev.memory.peak_op].name << "\" ("
                << FormatSeconds(ev.simulation.start_of(ev.memory.peak_op)) << " into the step)\n";
    if (!o.trace.empty()) std::cout << "trace written to " << o.trace << " (open in ui.perfetto.dev)\n";
    if (!o.svg.empty()) std::cout << "picture written to " << o.svg << "\n";
  }
}

}  // namespace

void AddSimulateCommand(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand("simulate", "Simulate one step of a plan on virtual streams");
  cmd->add_option("--plan", o->plan, "Plan file written by llmplan estimate -o")->required();
  cmd->add_option("--gpu", o->gpu, "Hardware profile to simulate on (default: the plan's)");
  cmd->add_option("--trace", o->trace, "Write a Chrome trace-event JSON (Perfetto) here");
  cmd->add_option("--svg", o->svg, "Draw the step's timeline and memory curve as SVG here");
  cmd->add_flag("--ckpt-async", o->ckpt_async,
                "The run will save checkpoints with --ckpt-async: count the host memory they stage");
  cmd->add_flag("--json", o->json, "Print JSON instead of text");
  cmd->callback([o] { Run(*o); });
}

}  // namespace llmplan::cli
