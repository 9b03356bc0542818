// ComparisonReport: a Comparison as one self-contained HTML page — no script,
// no web font, no link outside it, so it opens in any browser offline and can
// be mailed or archived beside the run: the step and memory summary with
// errors, the time per class of ops predicted beside measured, both memory
// timelines overlaid with their peaks, and the loss curve. When the run
// evaluated on held-out data (`llmplan run --eval-data`), the evaluation
// losses join the training loss on its chart and get a section of their own:
// read from c.run_dir's metrics.jsonl and summary.json, which a Comparison
// does not carry (a run without evaluation, or no readable directory there,
// gets the report without them).
#pragma once

#include <string>

#include "feedback/comparison.h"

namespace llmplan {

std::string ComparisonReportHtml(const Comparison& c);

// Writes ComparisonReportHtml(c) to `path` atomically.
// Throws UserError when it cannot be written.
void WriteComparisonReport(const Comparison& c, const std::string& path);

}  // namespace llmplan
