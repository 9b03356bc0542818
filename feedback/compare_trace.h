// SideBySideTrace: one step, predicted and measured, in one Chrome trace, so
// Perfetto shows them as two processes with the same tracks and op names:
// pid 1 "predicted" (the simulation) and pid 2 "measured" (a step of the run,
// as the executor's own trace.json draws it).
#pragma once

#include "feedback/measured_run.h"
#include "simulator/evaluate.h"
#include "simulator/trace.h"

namespace llmplan {

// REQUIRES: predicted was simulated with record_timeline (for its memory
// counter); measured ran predicted.program (CheckSameProgram).
ChromeTrace SideBySideTrace(const Evaluation& predicted, const MeasuredStep& measured);

}  // namespace llmplan
