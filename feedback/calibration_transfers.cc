// Calibration of the terms that price moving data (see calibration.h): the
// collective curves, the host<->device copy rates and the CPU AdamW rate.
// Each is fitted by relative error, like the compute terms.
#include <algorithm>
#include <cstdio>
#include <string>

#include "feedback/calibration_fits.h"
#include "feedback/least_squares.h"
#include "planner/cost_model.h"

namespace llmplan::calibration {

namespace {

// The share of the buffer each rank moves in a ring of n (hardware_profile.h's
// ring model; all-reduce moves twice as much, which cancels in a ratio).
double RingShare(int n) { return static_cast<double>(n - 1) / n; }

CollectiveCurve& CurveOf(HardwareProfile& p, bool spans_nodes, CollectiveOp op) {
  LinkCollectives& link = spans_nodes ? p.inter_node : p.intra_node;
  switch (op) {
    case CollectiveOp::kAllGather:
      return link.all_gather;
    case CollectiveOp::kReduceScatter:
      return link.reduce_scatter;
    case CollectiveOp::kAllReduce:
      return link.all_reduce;
  }
  return link.all_reduce;
}

// Is `op` a collective of `kind` among several GPUs? (A one-GPU gather is a
// cast, priced as compute; a collective in a group of one takes no time.)
bool IsCollective(const StepOp& op, CollectiveOp kind) {
  const bool on_collective_stream = op.stream == StreamKind::kGather || op.stream == StreamKind::kReduce;
  // A group across GPU islands is paced by the link between them, not by the
  // curve (HardwareProfile::CollectiveSeconds): it says nothing about the curve.
  return on_collective_stream && !CostModel::PricedAsCompute(op) && op.work.group_size > 1 &&
         op.work.collective == kind && !op.work.spans_islands;
}

// Measured ops of one class: y seconds each, and `work` units of what the
// rate prices (bytes, parameters), with `target` the share of y that the
// work took at full speed.
struct RateRows {
  std::vector<double> work, seconds, target;
  int runs = 0;
};

// One rate from rows: minimises sum ((work/rate - target y) / y)^2. Returns
// 0 when no row does any work.
double FitRate(const RateRows& rows) {
  const Eigen::Index n = static_cast<Eigen::Index>(rows.seconds.size());
  Eigen::MatrixXd A(n, 1);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    A(i, 0) = rows.work[i] / rows.seconds[i];
    b(i) = rows.target[i];
  }
  const double seconds_per_unit = n > 0 ? NonNegativeLeastSquares(A, b)(0) : 0;
  return seconds_per_unit > 0 ? 1 / seconds_per_unit : 0;
}

void RecordRate(const char* field, const char* unit, const char* missing, const RateRows& rows, double& value,
                Calibration& out) {
  const double before = value, rate = FitRate(rows);
  const int ops = static_cast<int>(rows.seconds.size());
  if (rate > 0) value = std::min(rate, 1e18);
  out.terms.push_back({field, rate > 0, before, value, rate > 0 ? "from " + OpsInRuns(ops, rows.runs) : missing});
  if (rate > 0) out.coefficients[field] = {{unit, rate}, {"ops", ops}};
}

// host.cpu_adam_alone_params_per_s from the runs whose process had the host
// to itself, host.cpu_adam_params_per_s from those that shared it. The two
// differ by how much more of the host several processes use than one, which
// the profile measured (llmplan profile runs AdamW alone and on every GPU at
// once); runs that exercise only one of them scale the other by the same
// factor, keeping that measured ratio: a one-GPU run's AdamW, slower in a
// step than in the profile's loop, says the host's summed rate is too.
void FitCpuAdamRates(const RateRows& alone, const RateRows& shared, HardwareProfile& profile, Calibration& out) {
  const double alone_before = profile.cpu_adam_alone_params_per_s, shared_before = profile.cpu_adam_params_per_s;
  const double alone_rate = FitRate(alone), shared_rate = FitRate(shared);
  const char* missing = "no run offloads the optimizer to the CPU";
  if (alone_rate <= 0 && shared_rate <= 0) {
    out.terms.push_back({"host.cpu_adam_alone_params_per_s", false, alone_before, alone_before, missing});
    out.terms.push_back({"host.cpu_adam_params_per_s", false, shared_before, shared_before, missing});
    return;
  }
  auto fitted = [&](const char* field, double rate, const RateRows& rows) {
    out.coefficients[field] = {{"params_per_s", rate}, {"ops", rows.seconds.size()}};
    return "from " + OpsInRuns(static_cast<int>(rows.seconds.size()), rows.runs);
  };
  auto scaled = [](double factor, const char* why) {
    char text[200];
    std::snprintf(text, sizeof text, "scaled by the other rate's fitted factor %.4g: %s", factor, why);
    return std::string(text);
  };
  std::string alone_note, shared_note;
  if (alone_rate > 0) {
    profile.cpu_adam_alone_params_per_s = std::min(alone_rate, 1e18);
    alone_note = fitted("host.cpu_adam_alone_params_per_s", alone_rate, alone);
  }
  if (shared_rate > 0) {
    profile.cpu_adam_params_per_s = std::min(shared_rate, 1e18);
    shared_note = fitted("host.cpu_adam_params_per_s", shared_rate, shared);
  }
  if (alone_rate <= 0) {
    const double factor = profile.cpu_adam_params_per_s / shared_before;
    profile.cpu_adam_alone_params_per_s = std::min(alone_before * factor, 1e18);
    alone_note = scaled(factor, "no run's process had the host to itself");
  }
  if (shared_rate <= 0) {
    const double factor = profile.cpu_adam_alone_params_per_s / alone_before;
    profile.cpu_adam_params_per_s = std::min(shared_before * factor, 1e18);
    shared_note = scaled(factor, "no run's processes shared the host");
  }
  out.terms.push_back(
      {"host.cpu_adam_alone_params_per_s", true, alone_before, profile.cpu_adam_alone_params_per_s, alone_note});
  out.terms.push_back({"host.cpu_adam_params_per_s", true, shared_before, profile.cpu_adam_params_per_s, shared_note});
}

}  // namespace

namespace {

// collectives.slowdown_during_compute is kept, not fitted. A collective
// slowed by s while compute ran beside it for w of its y measured seconds did
// y - w s/(1+s) seconds of its curve's work (as compute beside a collective,
// calibration_compute.cc), so the curves below are fitted to that share of
// y. Fitting s too would add one column, c w, beside each curve's scale; but
// in a step nearly every collective runs beside compute for nearly all of
// its time (the gathers prefetch behind blocks, the reduce-scatters behind
// backward), so w/y is about the same for every op and c moves exactly as
// the scales do: the runs cannot tell them apart. llmplan profile measures s
// directly (each collective alone and beside a block's GEMMs), and a
// measured number beats an unidentified fit. Returns c = s/(1+s).
double KeepCollectiveSlowdown(const HardwareProfile& profile, Calibration& out) {
  const double s = profile.collective_slowdown_during_compute;
  out.terms.push_back({"collectives.slowdown_during_compute", false, s, s,
                       s > 0 ? "measured by llmplan profile (collectives beside GEMMs against alone); not fitted: in "
                               "the runs it moves as the curves' scales do, which are fitted to the share of each "
                               "collective's time it leaves"
                             : "the profile did not measure it (llmplan profile measures it on 2+ GPUs); not "
                               "fitted: in the runs it moves as the curves' scales do"});
  return s / (1 + s);
}

}  // namespace

void FitCollectives(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out) {
  const double overlap_c = KeepCollectiveSlowdown(profile, out);
  const HardwareProfile start = profile;
  for (bool spans_nodes : {false, true}) {
    for (CollectiveOp kind : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllReduce}) {
      CollectiveCurve& curve = CurveOf(profile, spans_nodes, kind);
      const int m = curve.measured_group_size;
      const std::string field =
          std::string("collectives.") + (spans_nodes ? "inter_node." : "intra_node.") + CollectiveOpName(kind);
      // Rows: the starting curve's seconds at the op's size and group, and
      // the offset's effect there. Rewriting the points as scale t + offset
      // gives scale T + offset RingShare(n)/RingShare(m) at a group of n
      // (above the latency floor), exactly scale T + offset at m.
      std::vector<double> bytes, curve_s, offset_share, seconds, target;
      int runs_used = 0;
      std::vector<int> group_sizes;
      for (const CalibrationRun& run : runs) {
        const size_t before = seconds.size();
        const std::vector<double> beside =
            overlap_c > 0 ? MeanSecondsBeside(run, {StreamKind::kCompute}) : std::vector<double>(run.program.ops.size());
        for (const StepOp& op : run.program.ops) {
          if (!IsCollective(op, kind) || op.work.spans_nodes != spans_nodes) continue;
          const double y = run.measured.MeanSeconds(op.id);
          if (!(y > 0)) continue;
          const int n = op.work.group_size;
          bytes.push_back(op.work.collective_bytes);
          curve_s.push_back(start.CollectiveSeconds(kind, op.work.collective_bytes, n, spans_nodes));
          offset_share.push_back(RingShare(n) / RingShare(m));
          seconds.push_back(y);
          target.push_back(1 - overlap_c * beside[op.id] / y);  // the share of y the curve prices
          if (std::find(group_sizes.begin(), group_sizes.end(), n) == group_sizes.end()) group_sizes.push_back(n);
        }
        runs_used += seconds.size() > before;
      }
      const Eigen::Index rows = static_cast<Eigen::Index>(seconds.size());
      CurveFit fit{field, false, 1, 0, ""};
      if (rows == 0) {
        fit.note = std::string("the runs have no ") + CollectiveOpName(kind) + " among several GPUs" +
                   (spans_nodes ? " across nodes" : " within a node");
        out.curves.push_back(fit);
        continue;
      }
      // The offset is free in sign (a curve can be too slow by a constant):
      // +offset and -offset are two non-negative columns. What the runs can
      // tell: both when they measured several sizes; with one size, an
      // offset when every message sat at the curve's latency floor (a 4-byte
      // all-reduce says nothing about bandwidth), else a scale.
      Eigen::MatrixXd A(rows, 3);
      Eigen::VectorXd b(rows);
      for (Eigen::Index i = 0; i < rows; ++i) {
        b(i) = target[i];
        A(i, 0) = curve_s[i] / seconds[i];
        A(i, 1) = offset_share[i] / seconds[i];
        A(i, 2) = -A(i, 1);
      }
      const bool both = IdentifyColumns(A.leftCols(2), kMinIndependentFraction)[1].status == ColumnStatus::kIdentified;
      const bool latency_only =
          std::all_of(bytes.begin(), bytes.end(), [&](double x) { return x <= curve.points.front().first; });
      std::string how;
      if (both) {
        const Eigen::VectorXd x = NonNegativeLeastSquares(A, b);
        fit.scale = x(0);
        fit.offset_s = x(1) - x(2);
      }
      const bool positive = std::all_of(curve.points.begin(), curve.points.end(),
                                        [&](const auto& p) { return fit.scale * p.second + fit.offset_s > 0; });
      if (both && !positive) how = "; offset dropped: it would make a point non-positive";
      if (!both && latency_only) {
        const Eigen::VectorXd x = NonNegativeLeastSquares(A.rightCols(2), b - A.col(0));
        fit.offset_s = x(0) - x(1);
        how = "; scale kept at 1: every message sat at the curve's latency floor";
      } else if (!both || !positive) {
        fit.scale = NonNegativeLeastSquares(A.leftCols(1), b)(0);
        fit.offset_s = 0;
        if (!both) how = "; offset kept at 0: the runs measured one size only";
      }
      if (!(fit.scale > 0)) {
        fit.note = "the fit gave the curve no time";
        out.curves.push_back(fit);
        continue;
      }
      for (auto& [bytes, s] : curve.points) s = fit.scale * s + fit.offset_s;
      fit.fitted = true;
      std::string sizes;
      for (int n : group_sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(n);
      fit.note = "from " + OpsInRuns(static_cast<int>(rows), runs_used) + " at group size " + sizes + how;
      out.coefficients[field] = {
          {"scale", fit.scale}, {"offset_s", fit.offset_s}, {"ops", rows}, {"curve_group_size", m}};
      out.curves.push_back(fit);
    }
  }
}

void FitCopiesAndCpuOptimizer(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out) {
  RateRows to_device, to_host, adam, adam_alone;
  for (const CalibrationRun& run : runs) {
    // When both directions share one link, each runs at half speed while
    // both run (simulator.h): a copy that spent w of its y seconds beside
    // the other moved its bytes in y - w/2 seconds of the full rate.
    const std::vector<double> beside_d2h = MeanSecondsBeside(run, {StreamKind::kDeviceToHost});
    const std::vector<double> beside_h2d = MeanSecondsBeside(run, {StreamKind::kHostToDevice});
    const double shared = profile.copies_share_link ? 0.5 : 0.0;
    // Host memory bandwidth is shared between the copies and the CPU AdamW
    // (simulator.cc): a copy slowed by s for w of its y seconds moved its
    // bytes in y - w s/(1+s) seconds of its full rate, and so did the update
    // beside the copies. Both slowdowns are measured by llmplan profile and kept.
    const std::vector<double> beside_cpu = MeanSecondsBeside(run, {StreamKind::kCpu});
    const std::vector<double> beside_copies =
        MeanSecondsBeside(run, {StreamKind::kHostToDevice, StreamKind::kDeviceToHost});
    const double copy_c = profile.copy_slowdown_during_cpu_adam / (1 + profile.copy_slowdown_during_cpu_adam);
    const double adam_c = profile.cpu_adam_slowdown_during_copies / (1 + profile.cpu_adam_slowdown_during_copies);
    int used[4] = {0, 0, 0, 0};
    for (const StepOp& op : run.program.ops) {
      const double y = run.measured.MeanSeconds(op.id);
      if (!(y > 0)) continue;
      switch (op.kind) {
        case OpKind::kCopyParamsToDevice:
        case OpKind::kCopyParamsForGather:
        case OpKind::kCopyMasterToDevice:
          to_device.work.push_back(op.work.copy_bytes);
          to_device.seconds.push_back(y);
          to_device.target.push_back(std::max(0.05, 1 - shared * beside_d2h[op.id] / y - copy_c * beside_cpu[op.id] / y));
          used[0] = 1;
          break;
        case OpKind::kCopyGradsToHost:
        case OpKind::kCopyMasterToHost:
          to_host.work.push_back(op.work.copy_bytes);
          to_host.seconds.push_back(y);
          to_host.target.push_back(std::max(0.05, 1 - shared * beside_h2d[op.id] / y - copy_c * beside_cpu[op.id] / y));
          used[1] = 1;
          break;
        case OpKind::kCpuOptimizerStep: {
          // NVMe offload: the op's time is the disk's as much as the cores'
          // (cost_model.cc), so it says nothing certain about the AdamW rate.
          if (op.work.nvme_bytes > 0) break;
          // Alone, the process has the host to itself; beside others, each
          // has its share of the host's summed rate (cost_model.cc).
          const bool alone = op.work.host_sharers <= 1;
          RateRows& rows = alone ? adam_alone : adam;
          rows.work.push_back(op.work.cpu_adam_params * (alone ? 1 : op.work.host_sharers));
          rows.seconds.push_back(y);
          rows.target.push_back(std::max(0.05, 1 - adam_c * beside_copies[op.id] / y));
          used[alone ? 3 : 2] = 1;
          break;
        }
        default:
          break;
      }
    }
    to_device.runs += used[0];
    to_host.runs += used[1];
    adam.runs += used[2];
    adam_alone.runs += used[3];
  }
  RecordRate("host.host_to_device_bytes_per_s", "bytes_per_s", "the runs copy nothing host to device (no offload)",
             to_device, profile.host_to_device_bytes_per_s, out);
  RecordRate("host.device_to_host_bytes_per_s", "bytes_per_s", "the runs copy nothing device to host (no offload)",
             to_host, profile.device_to_host_bytes_per_s, out);
  FitCpuAdamRates(adam_alone, adam, profile, out);
}

}  // namespace llmplan::calibration
