#include "executor/run/run_cost.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "base/format.h"

namespace llmplan::executor {

namespace {

// Hours with the digits that matter at their size: 0.0041, 0.412, 12.35, 1234.
std::string Hours(double h) {
  char buf[64];
  std::snprintf(buf, sizeof buf, h >= 100 ? "%.0f" : h >= 1 ? "%.2f" : h >= 0.01 ? "%.3f" : "%.2g", h);
  return buf;
}

std::string Dollars(double usd) {
  if (usd > 0 && usd < 0.005) return "<$0.01";  // not "$0.00": it was not free
  char buf[64];
  std::snprintf(buf, sizeof buf, usd >= 1000 ? "$%.0f" : "$%.2f", usd);
  return buf;
}

}  // namespace

CostMeter::CostMeter(int world, double earlier_gpu_hours, double price_per_gpu_hour, int64_t tokens_per_step,
                     int64_t target_tokens)
    : world_(world),
      earlier_gpu_hours_(earlier_gpu_hours),
      price_(price_per_gpu_hour),
      tokens_per_step_(tokens_per_step),
      target_tokens_(target_tokens) {}

CostSnapshot CostMeter::StepDone(int64_t steps_taken, double elapsed_s, double step_s) {
  if (steps_here_ == 0) {
    first_end_s_ = elapsed_s;
    first_step_s_ = step_s;
  }
  ++steps_here_;
  last_end_s_ = elapsed_s;
  return At(steps_taken, elapsed_s);
}

CostSnapshot CostMeter::At(int64_t steps_taken, double elapsed_s) const {
  CostSnapshot c;
  c.gpu_hours = earlier_gpu_hours_ + world_ * elapsed_s / 3600;
  c.price_per_gpu_hour = price_;
  c.target_tokens = target_tokens_;
  c.tokens_done = steps_taken * tokens_per_step_;
  // A target between two steps takes the step that reaches it.
  const int64_t target_steps = (target_tokens_ + tokens_per_step_ - 1) / tokens_per_step_;
  const int64_t steps_left = std::max<int64_t>(0, target_steps - steps_taken);
  const double s_per_step =
      steps_here_ >= 2 ? (last_end_s_ - first_end_s_) / static_cast<double>(steps_here_ - 1) : first_step_s_;
  c.eta_s = static_cast<double>(steps_left) * s_per_step;
  c.projected_gpu_hours = c.gpu_hours + world_ * c.eta_s / 3600;
  return c;
}

void AddCostJson(const CostSnapshot& c, nlohmann::json& j) {
  j["gpu_hours"] = c.gpu_hours;
  j["tokens_done"] = c.tokens_done;
  j["target_tokens"] = c.target_tokens;
  j["eta_s"] = c.eta_s;
  j["projected_gpu_hours"] = c.projected_gpu_hours;
  if (!c.priced()) return;
  j["price_per_gpu_hour"] = c.price_per_gpu_hour;
  j["cost_usd"] = c.usd();
  j["projected_cost_usd"] = c.projected_usd();
}

std::string CostProgressText(const CostSnapshot& c, const std::string& unit) {
  const std::string h = " " + unit + "-h";
  std::string text = Hours(c.gpu_hours) + h;
  if (c.priced()) text += " " + Dollars(c.usd());
  if (c.eta_s > 0)
    text += "  eta " + FormatSeconds(c.eta_s) + " -> " + (c.priced() ? Dollars(c.projected_usd()) : Hours(c.projected_gpu_hours) + h);
  return text;
}

std::string CostSummaryText(const CostSnapshot& c, double earlier_gpu_hours, const std::string& unit) {
  const std::string h = " " + unit + "-h";
  std::string text = "cost: " + Hours(c.gpu_hours) + h;
  if (c.priced()) text += ", " + Dollars(c.usd()) + " at " + Dollars(c.price_per_gpu_hour) + "/" + unit + "-h";
  if (earlier_gpu_hours > 0) text += " (" + Hours(earlier_gpu_hours) + h + " of them by earlier attempts)";
  if (c.eta_s > 0) {
    text += "; to " + std::to_string(c.target_tokens) + " tokens: eta " + FormatSeconds(c.eta_s) + ", " +
            Hours(c.projected_gpu_hours) + h;
    if (c.priced()) text += ", " + Dollars(c.projected_usd());
  }
  return text;
}

}  // namespace llmplan::executor
