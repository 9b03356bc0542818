// ChromeTrace: a trace in the Chrome trace-event JSON format, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open. One track per stream, one span
// per operation, a counter track for memory. The simulator writes predicted
// traces with it and the executor writes measured ones, so a prediction and a
// run open side by side.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/step_program.h"
#include "simulator/simulator.h"

namespace llmplan {

class ChromeTrace {
 public:
  // `process` names the trace's process row (e.g. "predicted rank 0").
  ChromeTrace(int pid, const std::string& process);

  // Names track `tid` (call once per track, before or after its spans).
  void NameTrack(int tid, const std::string& name);
  // A span [start, end) in seconds on track `tid`.
  void AddSpan(int tid, const std::string& name, const std::string& category, double start_s, double end_s,
               nlohmann::json args = nlohmann::json::object());
  // A counter sample (e.g. memory in GiB) at time t.
  void AddCounter(const std::string& name, double t_s, double value);

  // Appends another trace's events (e.g. predicted and measured in one file).
  void Merge(const ChromeTrace& other);
  nlohmann::json ToJson() const;
  // Writes atomically (temp file + rename). Throws UserError on failure.
  void Write(const std::string& path) const;

 private:
  int pid_;
  nlohmann::json events_ = nlohmann::json::array();
};

// One step of `program` as a trace: a track per stream (named by
// StreamName), a span per op at `ops[op.id]` (zero-length releases skipped),
// and a "memory allocated (GiB)" counter from `memory` (device bytes in use,
// persistent ones included). Predicted and measured traces are both made by
// it, so they have the same tracks and names.
// REQUIRES: ops.size() == program.ops.size().
ChromeTrace StepTrace(const StepProgram& program, const std::vector<OpTiming>& ops,
                      const std::vector<MemorySample>& memory, int pid, const std::string& process);

// The predicted trace of a simulated program (StepTrace of its simulation),
// with the persistent bytes added to the simulated memory timeline.
// REQUIRES: sim was run with record_timeline for the counter.
ChromeTrace PredictedTrace(const StepProgram& program, const SimulationResult& sim, double persistent_bytes,
                           int pid = 1, const std::string& process = "predicted");

}  // namespace llmplan
