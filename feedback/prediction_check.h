// PredictionDisagreement: whether a run's step time strays from its
// prediction by more than a run on this machine is expected to, and which
// classes of ops (llmplan compare's) account for the difference. `llmplan
// run` asks once its warm-up is behind it, and prints the answer once.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "feedback/comparison.h"

namespace llmplan {

// Null when |c.step_time_s.error()| <= threshold (a fraction). Otherwise
//   {"message": "llmplan: the steps take 12.3% longer than predicted (...): optimizer +10.1 ms, ...",
//    "measured_step_s", "predicted_step_s", "error", "threshold", "profile",
//    "classes": [{"name", "measured_s", "predicted_s", "difference_s"}, ...]}
// with the classes whose measured seconds differ most from their predicted
// ones, largest first, as many as account for the step's difference (at most
// four, none below a tenth of it). `run_dir` is named in the message, for
// `llmplan compare --run`; `calibrated_runs` says where the threshold came
// from (the spread of that many recorded runs; 0: none, a fixed 5%).
nlohmann::json PredictionDisagreement(const Comparison& c, double threshold, const std::string& run_dir,
                                      int calibrated_runs);

}  // namespace llmplan
