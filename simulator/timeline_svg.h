// TimelineSvg: a picture of one simulated step — a lane per stream with a box
// per operation, colored by kind, and the memory curve below — as a
// self-contained SVG (no web dependency), for READMEs and HTML reports.
#pragma once

#include <string>

#include "planner/step_program.h"
#include "simulator/simulator.h"

namespace llmplan {

// REQUIRES: sim was run with record_timeline for the memory curve.
std::string TimelineSvg(const StepProgram& program, const SimulationResult& sim, double persistent_bytes,
                        const std::string& title);

}  // namespace llmplan
