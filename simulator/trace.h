// PredictedTrace: a simulated step as a Chrome trace (planner/step_trace.h),
// the same tracks and names as the trace `llmplan run` writes of a measured
// step, so the two open side by side in Perfetto.
#pragma once

#include <string>
#include <vector>

#include "planner/step_program.h"
#include "planner/step_trace.h"
#include "simulator/simulator.h"

namespace llmplan {

// The predicted trace of a simulated program (StepTrace of its simulation),
// with the persistent bytes added to the simulated memory timeline.
// REQUIRES: sim was run with record_timeline for the counter.
ChromeTrace PredictedTrace(const StepProgram& program, const SimulationResult& sim, double persistent_bytes,
                           int pid = 1, const std::string& process = "predicted");

}  // namespace llmplan
