// FitGemmEfficiency (see gemm_fit.h): closed-form weighted linear regression
// of y = 1/rate on x = 1/d with weights w = rate^2.
#include "executor/profile/gemm_fit.h"

#include <cmath>
#include <stdexcept>

namespace llmplan::executor {

GemmEfficiencyFit FitGemmEfficiency(const std::vector<GemmSample>& samples, double peak_flops) {
  if (samples.empty()) throw std::invalid_argument("FitGemmEfficiency: no samples");
  if (!(peak_flops > 0)) throw std::invalid_argument("FitGemmEfficiency: peak must be positive");
  double sw = 0, sx = 0, sy = 0;
  for (const GemmSample& s : samples) {
    if (!(s.min_dim > 0) || !(s.flops_per_s > 0) || !std::isfinite(s.flops_per_s))
      throw std::invalid_argument("FitGemmEfficiency: dimensions and rates must be positive");
    // Rates in units of the peak keep the weights near 1 (FLOP/s squared overflows nothing, but loses digits).
    const double w = (s.flops_per_s / peak_flops) * (s.flops_per_s / peak_flops);
    sw += w;
    sx += w / s.min_dim;
    sy += w / s.flops_per_s;
  }
  const double mx = sx / sw, my = sy / sw;
  double sxx = 0, sxy = 0;
  for (const GemmSample& s : samples) {
    const double w = (s.flops_per_s / peak_flops) * (s.flops_per_s / peak_flops);
    const double dx = 1 / s.min_dim - mx;
    sxx += w * dx * dx;
    sxy += w * dx * (1 / s.flops_per_s - my);
  }
  double b = sxx > 0 ? sxy / sxx : 0;
  double a = my - b * mx;
  if (b < 0 || a <= 0) {  // no dimension effect to fit (or a line through a < 0): a flat rate
    b = 0;
    a = my;
  }
  GemmEfficiencyFit fit;
  fit.max_efficiency = 1 / (a * peak_flops);
  fit.half_efficiency_dim = b / a;
  double squares = 0;
  for (const GemmSample& s : samples) {
    const double predicted = 1 / (a + b / s.min_dim);
    const double relative = predicted / s.flops_per_s - 1;
    squares += relative * relative;
  }
  fit.rms_relative_error = std::sqrt(squares / static_cast<double>(samples.size()));
  return fit;
}

}  // namespace llmplan::executor
