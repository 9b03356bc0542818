#include "planner/attention_rate_fit.h"

#include <algorithm>
#include <set>

namespace llmplan {
namespace {

struct Point {
  double seq, flops, seconds;
  double InverseRate() const { return seconds / flops; }
};

struct Width {
  int head_dim = 0;
  std::vector<Point> forward, backward;
};

size_t DistinctSeqs(const std::vector<Point>& points) {
  std::set<double> seqs;
  for (const Point& p : points) seqs.insert(p.seq);
  return seqs.size();
}

// Least squares on relative error of 1/rate = a + b/seq: each point weighted
// by 1/y^2 (y = 1/rate), so a slow short sequence counts as much as a fast
// long one. Returns b/a, the half-rate sequence; 0 when the points do not
// rise with the sequence (b <= 0) or do not determine a line.
double HalfRateSeq(const std::vector<Point>& points) {
  double s00 = 0, s01 = 0, s11 = 0, t0 = 0, t1 = 0;
  for (const Point& p : points) {
    const double y = p.InverseRate(), x = 1 / p.seq, w = 1 / (y * y);
    s00 += w;
    s01 += w * x;
    s11 += w * x * x;
    t0 += w * y;
    t1 += w * x * y;
  }
  const double det = s00 * s11 - s01 * s01;
  if (!(det > 0)) return 0;
  const double a = (t0 * s11 - t1 * s01) / det, b = (s00 * t1 - s01 * t0) / det;
  return a > 0 && b > 0 ? b / a : 0;
}

// The width's rate at `seq` on the curve 1/rate = a (1 + half/seq), a fitted
// on relative error with `half` fixed: a = sum(u/y) / sum(u^2/y^2), u = 1 + half/seq.
double RateAt(const std::vector<Point>& points, double half, double seq) {
  double num = 0, den = 0;
  for (const Point& p : points) {
    const double u = 1 + half / p.seq, y = p.InverseRate();
    num += u / y;
    den += u * u / (y * y);
  }
  const double a = num / den;
  return 1 / (a * (1 + half / seq));
}

double TotalRate(const std::vector<Point>& points) {
  double flops = 0, seconds = 0;
  for (const Point& p : points) {
    flops += p.flops;
    seconds += p.seconds;
  }
  return flops / seconds;
}

}  // namespace

void FitAttentionRates(const std::vector<AttentionRateRow>& rows, HardwareProfile& p) {
  std::vector<Width> widths;  // in the order measured; the first is the reference
  for (const AttentionRateRow& r : rows) {
    auto w = std::find_if(widths.begin(), widths.end(), [&](const Width& x) { return x.head_dim == r.head_dim; });
    if (w == widths.end()) w = widths.insert(widths.end(), Width{r.head_dim, {}, {}});
    w->forward.push_back({r.seq, r.forward_flops, r.forward_s});
    w->backward.push_back({r.seq, r.backward_flops, r.backward_s});
  }
  if (widths.empty()) return;
  const bool curves =
      std::all_of(widths.begin(), widths.end(), [](const Width& w) { return DistinctSeqs(w.forward) >= 2; });
  double reference_seq = 0, forward_half = 0, backward_half = 0;
  if (curves) {
    for (const Width& w : widths) {
      forward_half += HalfRateSeq(w.forward) / static_cast<double>(widths.size());
      backward_half += HalfRateSeq(w.backward) / static_cast<double>(widths.size());
    }
    for (const Point& q : widths.front().forward) reference_seq = std::max(reference_seq, q.seq);
  }
  // Each width's rate in one direction: on its curve at the reference
  // sequence, or total FLOPs over total seconds.
  auto rate = [&](const std::vector<Point>& points, double half) {
    return curves ? RateAt(points, half, reference_seq) : TotalRate(points);
  };
  const Width& ref = widths.front();
  p.attention_forward_flops_per_s = rate(ref.forward, forward_half);
  p.attention_backward_flops_per_s = rate(ref.backward, backward_half);
  p.attention_reference_head_dim = widths.size() > 1 ? ref.head_dim : 0;
  p.attention_widths.clear();
  for (size_t i = 1; i < widths.size(); ++i)
    p.attention_widths.push_back({widths[i].head_dim,
                                  rate(widths[i].forward, forward_half) / p.attention_forward_flops_per_s,
                                  rate(widths[i].backward, backward_half) / p.attention_backward_flops_per_s});
  const bool any_half = forward_half > 0 || backward_half > 0;
  p.attention_reference_seq = any_half ? static_cast<int>(reference_seq) : 0;
  p.attention_forward_half_rate_seq = any_half ? forward_half : 0;
  p.attention_backward_half_rate_seq = any_half ? backward_half : 0;
}

}  // namespace llmplan
