// How a Comparison's figures are written for people: the same labels, units
// and signed errors in `llmplan compare`'s text output and its HTML report.
#pragma once

#include <string>
#include <vector>

#include "feedback/comparison.h"

namespace llmplan {

// "+12.3%", "-20.0%"; "n/a" when the error is NaN (nothing measured).
std::string FormatError(double error);

// One figure of the step or memory summary, formatted in its unit.
struct SummaryRow {
  std::string label;  // "step time", "peak allocated", ...
  std::string predicted, measured;
  double error = 0;
};

// Step time, device step, exposed communication, tokens/s/GPU and MFU, then
// peak allocated and reserved memory.
std::vector<SummaryRow> StepRows(const Comparison& c);
std::vector<SummaryRow> MemoryRows(const Comparison& c);

// What the measured memory is, in words, from the run's memory_source
// ("the CUDA caching allocator's statistics", ...).
std::string DescribeMemorySource(const std::string& memory_source);

// "tiny-llama on 2 x cpu: full_shard, micro-batch 2 x grad-accum 2, 1 of 2 blocks checkpointed"
std::string DescribePlan(const Comparison& c);

}  // namespace llmplan
