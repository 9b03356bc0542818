#include "feedback/compare_trace.h"

#include <vector>

namespace llmplan {

ChromeTrace SideBySideTrace(const Evaluation& predicted, const MeasuredStep& measured) {
  ChromeTrace trace =
      PredictedTrace(predicted.program, predicted.simulation, predicted.memory.persistent, 1, "predicted");
  // The measured memory counter as the executor draws it: allocated bytes
  // when each op had been issued.
  std::vector<MemorySample> memory;
  for (const MeasuredOp& op : measured.ops) memory.push_back({op.issued_s, op.allocated});
  trace.Merge(StepTrace(predicted.program, measured.Spans(), memory, 2, "measured"));
  return trace;
}

}  // namespace llmplan
