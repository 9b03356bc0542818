// GemmEfficiencyFit: a hardware profile's two GEMM numbers fitted to measured
// GEMM rates. The cost model prices a bf16 GEMM with smallest side d at
//
//   rate(d) = peak * max_efficiency * d / (d + half_efficiency_dim)
//
// (HardwareProfile::GemmFlopsPerSecond): a GEMM with a thin side cannot fill
// the tensor cores' tiles, nor reuse each loaded operand enough to stay off
// the memory bound. Inverted, that is a line in 1/d:
//
//   1/rate = a + b/d,   a = 1 / (peak * max_efficiency),   b = half * a,
//
// so a least-squares line through (1/d, 1/rate) gives both numbers. Each
// point is weighted by rate^2, which makes its residual the relative error of
// the predicted time (t_pred/t_measured - 1): unweighted, the slowest, thinnest
// GEMMs' large 1/rate would outweigh the thick GEMMs that hold most of a step's
// FLOPs. Free of LibTorch: `llmplan profile` measures, this only fits.
#pragma once

#include <vector>

namespace llmplan::executor {

struct GemmSample {
  double min_dim = 0;      // d: the smallest of the GEMM's m, n, k
  double flops_per_s = 0;  // measured: 2*m*n*k / seconds
};

struct GemmEfficiencyFit {
  double max_efficiency = 0;       // 1 / (a * peak); may exceed 1 when `peak` is too low
  double half_efficiency_dim = 0;  // b / a; 0 when the rates do not fall with d
  double rms_relative_error = 0;   // of the fitted rates against the samples
};

// Weighted least squares on 1/rate = a + b/d over `samples` (the relative
// errors of the predicted times are minimised). When the slope comes out
// negative (thin GEMMs measured no slower than thick ones) or every sample has
// the same d, the dimension term is dropped: half_efficiency_dim = 0 and a is
// the weighted mean of 1/rate.
// REQUIRES: samples non-empty, every min_dim and flops_per_s > 0; peak_flops > 0.
// Throws std::invalid_argument otherwise.
GemmEfficiencyFit FitGemmEfficiency(const std::vector<GemmSample>& samples, double peak_flops);

}  // namespace llmplan::executor
