// StreamUse: how the spans of one step's ops use the device — compute busy
// time and exposed communication — by the simulator's
// definitions (simulator/simulator.h), so a measured step and a simulated one
// are summed the same way. Communication is what runs on the all-gather,
// reduce and copy streams; compute is the compute stream; CPU-stream work
// (the offloaded optimizer) is neither.
#pragma once

#include <vector>

#include "planner/step_program.h"
#include "simulator/simulator.h"

namespace llmplan {

struct StreamUse {
  double compute_busy = 0;  // time during which a compute-stream op runs
  // Time during which a communication or copy op runs and no compute op
  // does: communication nothing hid.
  double exposed_communication = 0;
};

// REQUIRES: spans.size() == program.ops.size() (indexed by op id), each with
// start <= end.
StreamUse MeasureStreamUse(const StepProgram& program, const std::vector<OpTiming>& spans);

}  // namespace llmplan
