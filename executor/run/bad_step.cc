#include "executor/run/bad_step.h"

#include <cmath>
#include <cstdio>
#include <numeric>

#include "base/user_error.h"

namespace llmplan::executor {

namespace {

constexpr size_t kHistory = 20;     // good steps averaged
constexpr size_t kMinHistory = 10;  // before spikes are judged

double Mean(const std::deque<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

}  // namespace

BadStepAction ParseBadStepAction(const std::string& text) {
  if (text == "stop") return BadStepAction::kStop;
  if (text == "skip") return BadStepAction::kSkip;
  throw UserError("--bad-step must be stop or skip, got '" + text + "'");
}

BadStepMonitor::BadStepMonitor(BadStepPolicy policy) : policy_(policy) {
  if (!(policy_.spike_factor == 0 || policy_.spike_factor > 1))
    throw UserError("--spike-factor must be 0 (off) or above 1, got " + std::to_string(policy_.spike_factor));
}

std::string BadStepMonitor::Check(const char* what, double value, const std::deque<double>& history) const {
  char text[160];
  if (!std::isfinite(value)) {
    std::snprintf(text, sizeof text, "%s is %g", what, value);
    return text;
  }
  if (policy_.spike_factor == 0 || history.size() < kMinHistory) return "";
  const double mean = Mean(history);
  if (!(value > policy_.spike_factor * mean)) return "";
  std::snprintf(text, sizeof text, "%s %.4g is %.0fx the mean %.4g of the last %zu steps", what, value, value / mean,
                mean, history.size());
  return text;
}

bool BadStepMonitor::GradNormIsGood(double grad_norm) const { return Check("gradient norm", grad_norm, norms_).empty(); }

std::string BadStepMonitor::Judge(double loss, double grad_norm) {
  std::string bad = Check("loss", loss, losses_);
  const std::string norm = Check("gradient norm", grad_norm, norms_);
  if (!norm.empty()) bad += (bad.empty() ? "" : ", ") + norm;
  if (!bad.empty()) return bad;
  losses_.push_back(loss);
  norms_.push_back(grad_norm);
  if (losses_.size() > kHistory) losses_.pop_front();
  if (norms_.size() > kHistory) norms_.pop_front();
  return "";
}

}  // namespace llmplan::executor
