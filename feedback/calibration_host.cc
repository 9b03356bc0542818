// Calibration of the host's terms (see calibration.h): the cost of issuing a
// kernel, and the time a step takes outside its program.
#include <algorithm>
#include <string>

#include "feedback/calibration_fits.h"
#include "planner/cost_model.h"

namespace llmplan::calibration {

void FitHostIssue(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out) {
  const bool cpu_device = profile.device_kind == "cpu";
  // IssueSeconds at one second per launch: the launches each op issues.
  HardwareProfile per_launch = profile;
  per_launch.kernel_launch_s = 1;
  const CostModel launches(per_launch);
  // Between two consecutive issues the host launched the second op's kernels,
  // and more when one of them held the host (rule 4 in step_program.h). Other
  // waits only ever add to a gap: a full launch queue (the host far ahead of
  // the device, as in a block's backward), a cudaMalloc, a descheduled
  // thread. So the issue cost is the lower quartile of gap per launch, not the
  // median or the mean, which those waits pull up.
  std::vector<double> per_kernel;
  int runs_used = 0;
  for (const CalibrationRun& run : runs) {
    const auto& ops = run.program.ops;
    const size_t before = per_kernel.size();
    for (const MeasuredStep* step : run.measured.TimedSteps()) {
      for (size_t i = 1; i < ops.size(); ++i) {
        if (HostBlocks(ops[i - 1], cpu_device) || HostBlocks(ops[i], cpu_device)) continue;
        const double kernels = launches.IssueSeconds(ops[i]);
        if (kernels <= 0) continue;
        const double gap = step->ops[i].issued_s - step->ops[i - 1].issued_s;
        if (gap > 0) per_kernel.push_back(gap / kernels);
      }
    }
    runs_used += per_kernel.size() > before;
  }
  const double before = profile.kernel_launch_s;
  constexpr size_t kMinGaps = 3;
  if (per_kernel.size() < kMinGaps) {
    out.terms.push_back({"compute.kernel_launch_s", false, before, before,
                         cpu_device ? "on a CPU device every op holds the host, which never runs ahead of the work"
                                    : "fewer than 3 issue gaps where the host ran ahead"});
    return;
  }
  auto quartile = per_kernel.begin() + static_cast<std::ptrdiff_t>(per_kernel.size() / 4);
  std::nth_element(per_kernel.begin(), quartile, per_kernel.end());
  profile.kernel_launch_s = std::min(*quartile, 1.0);
  out.terms.push_back({"compute.kernel_launch_s", true, before, profile.kernel_launch_s,
                       "lower quartile of " + std::to_string(per_kernel.size()) + " issue gaps per launch in " +
                           std::to_string(runs_used) + " run(s)"});
  out.coefficients["compute.kernel_launch_s"] = {{"seconds_per_kernel", *quartile}, {"gaps", per_kernel.size()}};
}

void FitStepOverhead(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out) {
  // Measured directly, as the step's wall time beyond its last op's end,
  // rather than as what the simulated program leaves unexplained: that would
  // turn the device model's errors into a constant added to every plan.
  const double before = profile.step_overhead_s;
  double sum = 0;
  nlohmann::json per_run = nlohmann::json::array();
  for (const CalibrationRun& run : runs) {
    const auto timed = run.measured.TimedSteps();
    double outside = 0;
    for (const MeasuredStep* s : timed) outside += (s->step_s - s->OpsMakespan()) / static_cast<double>(timed.size());
    per_run.push_back(outside);
    sum += outside;
  }
  const double mean = sum / static_cast<double>(runs.size());
  profile.step_overhead_s = std::clamp(mean, 0.0, 3600.0);
  out.terms.push_back(
      {"host.step_overhead_s", true, before, profile.step_overhead_s,
       "mean over " + std::to_string(runs.size()) + " run(s) of the step's wall time beyond its last op's end"});
  out.coefficients["host.step_overhead_s"] = {{"seconds_per_run", per_run}};
}

}  // namespace llmplan::calibration
