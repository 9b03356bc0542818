// Text reports of an Estimate, shared by `llmplan estimate` and `simulate`.
#pragma once

#include <ostream>

#include "planner/estimate.h"
#include "planner/hardware_profile.h"

namespace llmplan::cli {

// The plan, the per-GPU memory breakdown, the step time breakdown and throughput.
void PrintEstimate(std::ostream& out, const Estimate& e, const HardwareProfile& profile);

// "8,030,261,248"
std::string WithCommas(double value);

}  // namespace llmplan::cli
