// StepTrace: one step of a StepProgram as a Chrome trace, a track per stream
// and a span per op. Both interpreters make it — the simulator from predicted
// times, the executor from measured ones — so a prediction and a run open
// side by side in Perfetto with the same tracks and names.
#pragma once

#include <string>
#include <vector>

#include "base/chrome_trace.h"
#include "planner/step_program.h"

namespace llmplan {

// When an op ran, in seconds from the step's start.
struct OpTiming {
  double start = 0;
  double end = 0;
  double issued = 0;  // when the host issued it (rules 1 and 4 of step_program.h)
};

// Device bytes in use at a time of the step.
struct MemorySample {
  double time = 0;
  double bytes = 0;
};

// A track per stream (named by StreamName), a span per op at `ops[op.id]`
// (zero-length releases skipped), and a "memory allocated (GiB)" counter from
// `memory`.
// REQUIRES: ops.size() == program.ops.size().
ChromeTrace StepTrace(const StepProgram& program, const std::vector<OpTiming>& ops,
                      const std::vector<MemorySample>& memory, int pid, const std::string& process);

}  // namespace llmplan
