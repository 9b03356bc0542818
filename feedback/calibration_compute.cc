// Calibration of the compute terms (see calibration.h): one non-negative least
// squares over every compute op the runs measured, weighted by relative error
// so that a 20 us optimizer step counts as much as a 20 ms block, and over
// each run's total compute time (RelativeRows).
//
// Contention is fitted in the same solve. While a collective runs, the
// simulator runs compute at 1/(1+s) speed, so an op that spent w of its y
// measured seconds beside one did y - w s/(1+s) seconds of work alone:
//   y = X.a + c w,   c = s/(1+s),
// linear in (a, c). Leaving overlapped ops out instead would leave out nearly
// every block of a prefetching plan (each forward runs beside the next gather),
// and with them the only ops that do attention.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "feedback/calibration_fits.h"
#include "feedback/least_squares.h"
#include "planner/cost_model.h"

namespace llmplan::calibration {

namespace {

// The unknowns, in the order IdentifyColumns decides them: of two that move
// together, the earlier is fitted and the later keeps its starting value.
enum Term {
  kGemm,
  kAttentionForward,
  kAttentionBackward,
  kElementwise,
  kKernelOverhead,
  kHalfDim,
  kOverlap,
  kNumTerms
};
using Vector = std::array<double, kNumTerms>;

struct TermInfo {
  const char* field;
  const char* coefficient;  // what the least squares solves for
  const char* missing;      // why it is kept when no op exercises it
  bool may_be_zero;         // false for the inverse of a rate: zero would mean infinitely fast
};
constexpr TermInfo kTerm[kNumTerms] = {
    {"compute.gemm.max_efficiency", "seconds_per_gemm_flop", "no measured compute op does GEMMs", false},
    {"compute.attention.forward_flops_per_s", "seconds_per_attention_forward_flop",
     "no measured compute op runs attention forward", false},
    {"compute.attention.backward_flops_per_s", "seconds_per_attention_backward_flop",
     "no measured compute op runs attention backward", false},
    {"compute.elementwise_efficiency", "seconds_per_elementwise_byte",
     "no measured compute op runs memory-bound kernels", false},
    {"compute.kernel_overhead_s", "seconds_per_kernel", "no measured compute op launches a kernel", true},
    {"compute.gemm.half_efficiency_dim", "seconds_per_gemm_flop_times_dim", "no measured compute op does GEMMs", true},
    {"compute.slowdown_during_collectives", "share_of_overlapped_seconds_lost",
     "no measured compute op ran beside a collective", true},
};

// An op measured at or below this multiple of its launches' host cost ran at
// the pace the host issued it, not at the device's.
constexpr double kLaunchFloorMargin = 1.05;

// CostModel::ComputeSeconds as a linear function of the coefficients, plus
// the seconds the op spent beside a collective. Attention of another head
// width or sequence counts as its FLOPs over the profile's measured fraction
// for that width and length, which the fit keeps: it refits the reference rates.
Vector Features(const OpWork& w, double overlapped_s, const HardwareProfile& p) {
  const double d = std::max(1.0, w.gemm_min_dim);  // as HardwareProfile::GemmFlopsPerSecond
  const bool back = w.attention_backward;
  const double reference = back ? p.attention_backward_flops_per_s : p.attention_forward_flops_per_s;
  const double attention =
      w.attention_flops * reference / p.AttentionFlopsPerSecond(back, w.attention_head_dim, w.attention_seq);
  return {w.gemm_flops,
          back ? 0 : attention,
          back ? attention : 0,
          w.elementwise_bytes,
          static_cast<double>(w.launches),
          w.gemm_flops / d,
          overlapped_s};
}

Vector Coefficients(const HardwareProfile& p) {
  const double gemm = 1 / (p.bf16_peak_flops * p.gemm_max_efficiency);
  const double s = p.compute_slowdown_during_collectives;
  return {gemm,
          1 / p.attention_forward_flops_per_s,
          1 / p.attention_backward_flops_per_s,
          1 / (p.memory_bandwidth_bytes_per_s * p.elementwise_efficiency),
          p.kernel_overhead_s,
          p.gemm_half_efficiency_dim * gemm,
          s / (1 + s)};
}

// Keeps `value` within [lo, hi], saying so in `note`.
double Clamp(double value, double lo, double hi, const char* why, std::string& note) {
  const double kept = std::clamp(value, lo, hi);
  if (std::abs(kept - value) <= 1e-9 * std::abs(kept)) return kept;  // rounding, not a clamp
  char text[160];
  std::snprintf(text, sizeof text, "; fitted %.4g, clamped to %.4g%s", value, kept, why);
  note += text;
  return kept;
}

std::string Fraction(double f) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2g", f);
  return text;
}

// Writes the fitted coefficients into the profile fields they stand for;
// `notes` gain what had to be clamped for the profile to stay loadable.
void WriteBack(const Vector& a, const std::array<bool, kNumTerms>& active, HardwareProfile& p,
               std::array<std::string, kNumTerms>& notes, Calibration& out) {
  if (active[kGemm])
    p.gemm_max_efficiency =
        Clamp(1 / (p.bf16_peak_flops * a[kGemm]), 0.01, 1.0, " (the profile's range)", notes[kGemm]);
  if (active[kHalfDim]) p.gemm_half_efficiency_dim = Clamp(a[kHalfDim] / a[kGemm], 0, 1e6, "", notes[kHalfDim]);
  if (active[kAttentionForward])
    p.attention_forward_flops_per_s = Clamp(1 / a[kAttentionForward], 1, 1e18, "", notes[kAttentionForward]);
  if (active[kAttentionBackward])
    p.attention_backward_flops_per_s = Clamp(1 / a[kAttentionBackward], 1, 1e18, "", notes[kAttentionBackward]);
  if (active[kElementwise]) {
    // The fitted rate is bandwidth x efficiency; the bandwidth (a device-copy
    // measurement) moves only when the rate exceeds it.
    const double rate = 1 / a[kElementwise];
    if (rate > p.memory_bandwidth_bytes_per_s) {
      out.terms.push_back({"compute.memory_bandwidth_bytes_per_s", true, p.memory_bandwidth_bytes_per_s, rate,
                           "raised to the fitted rate of memory-bound kernels, which exceeds it"});
      p.memory_bandwidth_bytes_per_s = rate;
    }
    p.elementwise_efficiency =
        Clamp(rate / p.memory_bandwidth_bytes_per_s, 0.01, 1.0,
              " (the profile's floor: memory-bound kernels are predicted too fast)", notes[kElementwise]);
  }
  if (active[kKernelOverhead]) p.kernel_overhead_s = Clamp(a[kKernelOverhead], 0, 1, "", notes[kKernelOverhead]);
  if (active[kOverlap]) {
    const double c = a[kOverlap];  // c = s/(1+s) < 1 for any finite slowdown
    p.compute_slowdown_during_collectives =
        Clamp(c < 1 ? c / (1 - c) : 1e300, 0, 10, " (the profile's limit)", notes[kOverlap]);
  }
}

double FieldValue(const HardwareProfile& p, Term t) {
  switch (t) {
    case kGemm:
      return p.gemm_max_efficiency;
    case kAttentionForward:
      return p.attention_forward_flops_per_s;
    case kAttentionBackward:
      return p.attention_backward_flops_per_s;
    case kElementwise:
      return p.elementwise_efficiency;
    case kKernelOverhead:
      return p.kernel_overhead_s;
    case kHalfDim:
      return p.gemm_half_efficiency_dim;
    case kOverlap:
      return p.compute_slowdown_during_collectives;
    case kNumTerms:
      break;
  }
  return 0;
}

// True when, in most timed steps, a GPU began the op before the host had
// finished issuing it: the device had nothing queued (the op waited on a host
// op such as the offloaded CPU AdamW, or it opens the step), so it ran at the
// pace its kernels were launched — the host's speed, not the device's. Such
// an op measures neither the GEMM nor the attention rate; fitted, the 1-2 ms
// of host pace a block shows beside a CPU AdamW read as a slower device.
bool HostPaced(const MeasuredRun& run, int op) {
  int paced = 0, steps = 0;
  for (const MeasuredStep* step : run.TimedSteps()) {
    ++steps;
    paced += step->ops[op].start_s < step->ops[op].issued_s;
  }
  return 2 * paced > steps;
}

// Every compute op the runs measured.
struct Candidates {
  std::vector<Vector> features;  // Features(): the work, and the seconds beside a collective
  std::vector<double> seconds;   // mean measured
  std::vector<double> floor;     // launches x kernel_launch_s: the host's pace
  std::vector<int> run;          // which run
};

Candidates CollectCandidates(const std::vector<CalibrationRun>& runs, const HardwareProfile& profile) {
  Candidates c;
  // On a CPU device every op is host work, timed by the host that issued it.
  const bool cpu_device = profile.device_kind == "cpu";
  for (size_t r = 0; r < runs.size(); ++r) {
    const CalibrationRun& run = runs[r];
    const std::vector<double> beside = MeanSecondsBeside(run, {StreamKind::kGather, StreamKind::kReduce});
    for (const StepOp& op : run.program.ops) {
      // Clipping is priced as if the norm exceeded the limit; whether it
      // scaled anything depends on the step's gradients, not on the device.
      if (!CostModel::PricedAsCompute(op) || op.kind == OpKind::kClipGradients) continue;
      const double y = run.measured.MeanSeconds(op.id);
      if (!(y > 0) || (!cpu_device && HostPaced(run.measured, op.id))) continue;
      // Only the compute stream slows beside a collective (a one-GPU gather's cast does not).
      c.features.push_back(Features(op.work, op.stream == StreamKind::kCompute ? beside[op.id] : 0, profile));
      c.seconds.push_back(y);
      c.floor.push_back(op.work.launches * profile.kernel_launch_s);
      c.run.push_back(static_cast<int>(r));
    }
  }
  return c;
}

// The rows of the least squares. One per op: its features over its measured
// seconds, so every op counts by its relative error. Then one per run: the
// sum of its ops' features over the sum of their seconds, weighted as much as
// all its ops together — where the model cannot fit every op (a CPU's
// per-op costs), relative errors alone would spend the big ops' time to fit
// the small ones, and the step's time is the sum.
struct Rows {
  Eigen::MatrixXd matrix;  // the ops' rows, then the runs'
  Eigen::VectorXd target;  // what each row should come to
  Eigen::Index ops = 0;
};

Rows RelativeRows(const Candidates& c, const std::vector<bool>& use, int runs) {
  std::vector<size_t> used;
  for (size_t i = 0; i < use.size(); ++i)
    if (use[i]) used.push_back(i);
  std::vector<Vector> run_features(runs, Vector{});
  std::vector<double> run_seconds(runs, 0.0), run_ops(runs, 0.0);
  Rows rows;
  rows.ops = static_cast<Eigen::Index>(used.size());
  rows.matrix = Eigen::MatrixXd::Zero(rows.ops + runs, kNumTerms);
  rows.target = Eigen::VectorXd::Ones(rows.ops + runs);
  Eigen::MatrixXd& R = rows.matrix;
  for (size_t k = 0; k < used.size(); ++k) {
    const size_t i = used[k];
    for (int j = 0; j < kNumTerms; ++j) {
      R(static_cast<Eigen::Index>(k), j) = c.features[i][j] / c.seconds[i];
      run_features[c.run[i]][j] += c.features[i][j];
    }
    run_seconds[c.run[i]] += c.seconds[i];
    run_ops[c.run[i]] += 1;
  }
  for (int r = 0; r < runs; ++r) {
    const double weight = std::sqrt(run_ops[r]);  // 0 for a run with no op in the fit
    rows.target(rows.ops + r) = weight;
    for (int j = 0; j < kNumTerms; ++j)
      if (weight > 0) R(rows.ops + r, j) = weight * run_features[r][j] / run_seconds[r];
  }
  return rows;
}

// What the solve decided per term.
struct Solution {
  Vector a{};  // coefficients, fitted or starting
  std::array<bool, kNumTerms> fitted{};
  std::array<bool, kNumTerms> at_bound{};  // fitted, at the datasheet peak
  std::array<std::string, kNumTerms> why_kept;
};

// Non-negative least squares over the fitted terms, with the kept terms'
// time taken off the measurement. GEMM and attention cannot beat the
// datasheet peak: a >= 1/peak, solved as a shifted non-negative variable. A
// memory-bound rate driven to zero cannot be written into a profile, so it
// is kept and the rest solved again.
void Solve(const Eigen::MatrixXd& R, const Eigen::VectorXd& target, const Vector& start, const Vector& lower,
           Solution& s) {
  const Eigen::Index n = R.rows();
  for (bool resolve = true; resolve;) {
    resolve = false;
    // With the half-efficiency dimension kept, a1 = half * a0: one column.
    const bool merge_half = s.fitted[kGemm] && !s.fitted[kHalfDim];
    std::vector<int> cols;
    for (int j = 0; j < kNumTerms; ++j)
      if (s.fitted[j]) cols.push_back(j);
    const Eigen::Index k = static_cast<Eigen::Index>(cols.size());
    Eigen::MatrixXd A(n, k);
    Eigen::VectorXd b = target, shift(k);
    for (Eigen::Index c = 0; c < k; ++c) {
      A.col(c) = R.col(cols[c]);
      if (cols[c] == kGemm && merge_half) A.col(c) += R.col(kHalfDim) * (start[kHalfDim] / start[kGemm]);
      shift(c) = lower[cols[c]];
    }
    for (int j = 0; j < kNumTerms; ++j)
      if (!s.fitted[j] && !(j == kHalfDim && merge_half)) b -= R.col(j) * start[j];
    const Eigen::VectorXd above = NonNegativeLeastSquares(A, b - A * shift);
    for (Eigen::Index c = 0; c < k; ++c) {
      const int j = cols[c];
      if (above(c) > 0 || lower[j] > 0 || kTerm[j].may_be_zero) continue;
      s.fitted[j] = false;
      s.why_kept[j] = "the fit drove it to zero, which a rate cannot be";
      resolve = true;
    }
    if (resolve) continue;
    for (Eigen::Index c = 0; c < k; ++c) {
      s.a[cols[c]] = above(c) + shift(c);
      s.at_bound[cols[c]] = lower[cols[c]] > 0 && above(c) == 0;
    }
    if (merge_half) s.a[kHalfDim] = s.a[kGemm] * start[kHalfDim] / start[kGemm];
  }
}

// Which terms the op rows identify, then the non-negative least squares.
Solution FitRows(const Rows& rows, const Vector& start, const Vector& lower,
                 std::vector<ColumnIdentification>& identified) {
  Solution s;
  s.a = start;
  identified.assign(kNumTerms, {});
  if (rows.ops > 0) identified = IdentifyColumns(rows.matrix.topRows(rows.ops), kMinIndependentFraction);
  for (int j = 0; j < kNumTerms; ++j) {
    s.fitted[j] = identified[j].status == ColumnStatus::kIdentified;
    if (identified[j].status == ColumnStatus::kAllZero) s.why_kept[j] = kTerm[j].missing;
    if (identified[j].status == ColumnStatus::kCollinear)
      s.why_kept[j] = std::string(j == kHalfDim ? "the runs' GEMMs do not vary their smallest side enough to tell it "
                                                  "from the peak efficiency"
                                                : "across the runs' ops it varies almost in proportion to the terms "
                                                  "before it") +
                      " (" + Fraction(identified[j].independent_fraction) + " independent of them)";
  }
  Solve(rows.matrix, rows.target, start, lower, s);
  return s;
}

}  // namespace

void FitCompute(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out) {
  const Candidates candidates = CollectCandidates(runs, profile);
  const size_t count = candidates.seconds.size();
  const Vector start = Coefficients(profile);
  const double peak = 1 / profile.bf16_peak_flops;
  const Vector lower = {peak, peak, peak, 0, 0, 0, 0};

  // An op whose kernels take less than the host needs to launch them runs at
  // the host's pace (the cost model's floor), which the linear terms cannot
  // describe. Which ops those are depends on the fit: start from the ops
  // measured at the floor, then drop the ops the fit says are below it,
  // until that set settles.
  std::vector<bool> use(count);
  for (size_t i = 0; i < count; ++i) use[i] = candidates.seconds[i] > kLaunchFloorMargin * candidates.floor[i];
  Rows rows;
  Solution s;
  std::vector<ColumnIdentification> identified;
  for (int pass = 0; pass < 10; ++pass) {
    rows = RelativeRows(candidates, use, static_cast<int>(runs.size()));
    s = FitRows(rows, start, lower, identified);
    std::vector<bool> above_floor(count);
    for (size_t i = 0; i < count; ++i) {
      double device = 0;
      for (int j = 0; j < kNumTerms; ++j)
        if (j != kOverlap) device += candidates.features[i][j] * s.a[j];
      above_floor[i] = device > kLaunchFloorMargin * candidates.floor[i];
    }
    if (above_floor == use) break;
    use = above_floor;
  }
  const Eigen::Index n = rows.ops;
  std::vector<bool> run_used(runs.size(), false);
  for (size_t i = 0; i < count; ++i)
    if (use[i]) run_used[candidates.run[i]] = true;
  const int runs_used = static_cast<int>(std::count(run_used.begin(), run_used.end(), true));
  const int at_floor = static_cast<int>(count) - static_cast<int>(n);
  if (n == 0 && at_floor > 0)
    for (auto& why : s.why_kept) why = "every measured compute op ran at the pace the host issued it";

  double squares = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    double predicted = 0;
    for (int j = 0; j < kNumTerms; ++j) predicted += rows.matrix(i, j) * s.a[j];
    squares += (predicted - 1) * (predicted - 1);
  }
  std::array<std::string, kNumTerms> clamp_notes;
  HardwareProfile fitted = profile;
  WriteBack(s.a, s.fitted, fitted, clamp_notes, out);
  nlohmann::json& coefficients = out.coefficients["compute"];
  coefficients = {{"ops", n},
                  {"runs", runs_used},
                  {"ops_at_launch_floor", at_floor},
                  {"rms_relative_residual", n > 0 ? std::sqrt(squares / static_cast<double>(n)) : 0.0}};
  for (int j = 0; j < kNumTerms; ++j) {
    const Term t = static_cast<Term>(j);
    coefficients["independent_fraction"][kTerm[j].coefficient] = identified[j].independent_fraction;
    if (s.fitted[j]) coefficients[kTerm[j].coefficient] = s.a[j];
    std::string note = s.why_kept[j];
    if (s.fitted[j])
      note = "from " + OpsInRuns(static_cast<int>(n), runs_used) + clamp_notes[j] +
             (s.at_bound[j] ? "; at the datasheet peak, the bound (the runs would have it faster)" : "");
    out.terms.push_back({kTerm[j].field, s.fitted[j], FieldValue(profile, t), FieldValue(fitted, t), note});
  }
  profile = fitted;
}

}  // namespace llmplan::calibration
