#include "feedback/prediction_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "base/format.h"

namespace llmplan {

nlohmann::json PredictionDisagreement(const Comparison& c, double threshold, const std::string& run_dir,
                                      int calibrated_runs) {
  const double error = c.step_time_s.error();
  if (!std::isfinite(error) || std::abs(error) <= threshold) return nullptr;
  const double step_difference = c.step_time_s.measured - c.step_time_s.predicted;

  std::vector<const OpClassComparison*> classes;
  for (const OpClassComparison& k : c.classes) classes.push_back(&k);
  auto difference = [](const OpClassComparison* k) { return k->seconds.measured - k->seconds.predicted; };
  std::sort(classes.begin(), classes.end(),
            [&](const auto* a, const auto* b) { return std::abs(difference(a)) > std::abs(difference(b)); });
  nlohmann::json named = nlohmann::json::array();
  std::string list;
  double accounted = 0;
  for (const OpClassComparison* k : classes) {
    const double d = difference(k);
    if (named.size() == 4 || std::abs(d) < 0.1 * std::abs(step_difference)) break;
    accounted += d;
    named.push_back({{"name", k->name},
                     {"measured_s", k->seconds.measured},
                     {"predicted_s", k->seconds.predicted},
                     {"difference_s", d}});
    list += (list.empty() ? "" : ", ") + k->name + " " + (d >= 0 ? "+" : "-") + FormatSeconds(std::abs(d));
    if (accounted / step_difference >= 0.9) break;  // these account for it
  }
  char head[400], basis[160];
  if (calibrated_runs > 0)
    std::snprintf(basis, sizeof basis, "the %d run(s) recorded on this machine stray up to %.1f%%", calibrated_runs,
                  100 * threshold);
  else
    std::snprintf(basis, sizeof basis, "more than %.1f%%, with no run recorded on this machine to calibrate it",
                  100 * threshold);
  std::snprintf(head, sizeof head, "llmplan: note: the steps take %.1f%% %s than predicted (%s measured, %s predicted on %s; %s)",
                100 * std::abs(step_difference) / c.step_time_s.predicted, step_difference > 0 ? "longer" : "less",
                FormatSeconds(c.step_time_s.measured).c_str(), FormatSeconds(c.step_time_s.predicted).c_str(),
                c.profile.c_str(), basis);
  std::string message = head;
  message += list.empty() ? ": no class of ops stands out" : ": " + list + " per step";
  message += " (llmplan compare --run " + run_dir + ": every class)";
  return {{"message", message},
          {"measured_step_s", c.step_time_s.measured},
          {"predicted_step_s", c.step_time_s.predicted},
          {"error", error},
          {"threshold", threshold},
          {"profile", c.profile},
          {"classes", named}};
}

}  // namespace llmplan
