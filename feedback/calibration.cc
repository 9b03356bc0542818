#include "feedback/calibration.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "feedback/calibration_fits.h"
#include "planner/memory_timeline.h"
#include "base/user_error.h"

namespace llmplan {

CalibrationRun PrepareCalibrationRun(MeasuredRun run, const HardwareProfile& start) {
  CalibrationRun r{std::move(run), {}};
  r.program = BuildStepProgram(r.measured.plan, start);
  CheckSameProgram(r.measured, r.program);
  return r;
}

Comparison CompareOnProfile(const CalibrationRun& run, const HardwareProfile& profile) {
  Evaluation predicted;
  predicted.program = run.program;
  predicted.simulation = Simulate(predicted.program, CostModel(profile));
  predicted.memory = ReplayMemory(predicted.program);
  predicted.reserved = ReplayAllocatorIfItCanFit(run.measured.plan, profile, predicted.program, predicted.memory);
  predicted.estimate = EstimateFromSimulation(run.measured.plan, profile, predicted.program, predicted.simulation,
                                              predicted.memory, predicted.reserved);
  return Compare(run.measured, predicted, profile);
}

std::string HardwareName(const Plan& plan) { return ProfileHardwareName(plan.profile); }

std::string ProfileHardwareName(const std::string& profile) {
  std::string name = std::filesystem::path(profile).filename().string();
  const std::string json = ".json", calibrated = "-calibrated";
  if (name.size() > json.size() && name.ends_with(json)) name.resize(name.size() - json.size());
  while (name.size() > calibrated.size() && name.ends_with(calibrated)) name.resize(name.size() - calibrated.size());
  return name;
}

void CheckOneKindOfHardware(const std::vector<const MeasuredRun*>& runs, const HardwareProfile& start) {
  for (const MeasuredRun* run : runs) {
    if (HardwareName(run->plan) != HardwareName(runs.front()->plan))
      throw UserError("runs " + runs.front()->dir + " (planned for " + HardwareName(runs.front()->plan) + ") and " +
                      run->dir + " (planned for " + HardwareName(run->plan) +
                      ") ran on different hardware: calibrate one profile from runs on one kind of device");
    const std::string device = run->device.substr(0, run->device.find(':'));  // "cuda:1" -> "cuda"
    if (!device.empty() && device != start.device_kind)
      throw UserError("run " + run->dir + " ran on " + run->device + ", but profile " + start.name + " describes " +
                      start.device_kind + " devices: its times say nothing about them");
  }
}

namespace calibration {

std::vector<double> MeanSecondsBeside(const CalibrationRun& run, const std::vector<StreamKind>& beside) {
  const auto& ops = run.program.ops;
  const auto timed = run.measured.TimedSteps();
  std::vector<double> mean(ops.size(), 0.0);
  for (const MeasuredStep* step : timed) {
    // The union of the `beside` streams' spans, as disjoint sorted intervals.
    std::vector<std::pair<double, double>> spans;
    for (const StepOp& op : ops)
      if (std::find(beside.begin(), beside.end(), op.stream) != beside.end())
        spans.emplace_back(step->ops[op.id].start_s, step->ops[op.id].end_s);
    std::sort(spans.begin(), spans.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& s : spans) {
      if (!merged.empty() && s.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, s.second);
      else
        merged.push_back(s);
    }
    for (const StepOp& op : ops) {
      const MeasuredOp& m = step->ops[op.id];
      double overlap = 0;
      for (const auto& [lo, hi] : merged) overlap += std::max(0.0, std::min(hi, m.end_s) - std::max(lo, m.start_s));
      mean[op.id] += overlap / static_cast<double>(timed.size());
    }
  }
  return mean;
}

std::string OpsInRuns(int ops, int runs) {
  return std::to_string(ops) + (ops == 1 ? " op" : " ops") + " in " + std::to_string(runs) +
         (runs == 1 ? " run" : " runs");
}

void SetMemoryMargin(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out) {
  // The margin is relative to the prediction: a plan fits when its predicted
  // peak times (1 + margin) does, so it must cover measured / predicted - 1.
  double worst = 0;
  int measured_runs = 0;
  int rss_runs = 0;
  for (const CalibrationRun& run : runs) {
    // A process's resident set counts libraries and host buffers the model
    // of the allocator does not: no measure of its error.
    if (run.measured.steps.back().memory_source == "process_peak_rss") {
      ++rss_runs;
      continue;
    }
    const Comparison c = CompareOnProfile(run, profile);
    const ComparedValue &allocated = c.peak_allocated_bytes, &reserved = c.peak_reserved_bytes;
    if (allocated.measured <= 0 || allocated.predicted <= 0) continue;
    ++measured_runs;
    worst = std::max({worst, allocated.measured / allocated.predicted - 1, reserved.measured / reserved.predicted - 1});
  }
  const double before = profile.memory_margin_fraction;
  if (measured_runs == 0) {
    out.terms.push_back({"memory.margin_fraction", false, before, before,
                         rss_runs > 0 ? "the runs measured memory as the process's resident set only"
                                      : "no run measured its peak memory"});
    return;
  }
  profile.memory_margin_fraction = std::min(worst, 0.5);
  std::string note = "the largest under-prediction of peak allocated or reserved memory in " +
                     std::to_string(measured_runs) + " run(s)";
  if (worst > 0.5) note += "; it was " + std::to_string(worst) + ", above the profile's limit of 0.5";
  out.terms.push_back({"memory.margin_fraction", true, before, profile.memory_margin_fraction, note});
}

}  // namespace calibration

namespace {

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string SourceOf(const Calibration& c, const HardwareProfile& start, const std::vector<CalibrationRun>& runs) {
  std::string source = "calibrated " + UtcNow() + " by llmplan calibrate from profile " + start.name + " and " +
                       std::to_string(runs.size()) + " run(s):";
  for (size_t i = 0; i < runs.size(); ++i)
    source += std::string(i ? "," : "") + " " + runs[i].measured.dir + " (" + runs[i].measured.plan.model.name + ")";
  std::string fitted, kept;
  auto add = [](std::string& list, const std::string& field) { list += (list.empty() ? "" : ", ") + field; };
  for (const FittedTerm& t : c.terms) add(t.fitted ? fitted : kept, t.field);
  for (const CurveFit& f : c.curves)
    if (f.fitted) add(fitted, f.field);
  return source + ". Fitted: " + (fitted.empty() ? "nothing" : fitted) + ". Kept from " + start.name +
         " (see calibration.terms for why): " + (kept.empty() ? "none" : kept) + ", and every other number.";
}

}  // namespace

Calibration Calibrate(const HardwareProfile& start, const std::vector<CalibrationRun>& runs) {
  Calibration c;
  HardwareProfile p = start;
  // Host issue first: the compute fit leaves out ops measured at its pace.
  calibration::FitHostIssue(runs, p, c);
  calibration::FitCompute(runs, p, c);
  calibration::FitCollectives(runs, p, c);
  calibration::FitCopiesAndCpuOptimizer(runs, p, c);
  bool any = std::any_of(c.terms.begin(), c.terms.end(), [](const FittedTerm& t) { return t.fitted; }) ||
             std::any_of(c.curves.begin(), c.curves.end(), [](const CurveFit& f) { return f.fitted; });
  if (!any) {
    const auto gemm = std::find_if(c.terms.begin(), c.terms.end(),
                                   [](const FittedTerm& t) { return t.field == "compute.gemm.max_efficiency"; });
    throw UserError("too few measured ops to fit any term of profile " + start.name + ": " + gemm->field + ": " +
                    gemm->note + ", and the runs have no collective, copy or CPU optimizer step either");
  }
  calibration::FitStepOverhead(runs, p, c);
  calibration::SetMemoryMargin(runs, p, c);

  std::string base = start.name;
  const std::string suffix = "-calibrated";
  if (base.ends_with(suffix)) base.resize(base.size() - suffix.size());
  p.name = base + suffix;
  c.profile = p;
  c.profile.source = SourceOf(c, start, runs);
  // The written profile must load: the same checks as any profile file.
  c.profile = HardwareProfileFromJson(HardwareProfileToJson(c.profile), "calibrated profile " + p.name);
  return c;
}

nlohmann::json CalibrationToJson(const Calibration& c) {
  nlohmann::json terms = nlohmann::json::array(), curves = nlohmann::json::array();
  for (const FittedTerm& t : c.terms)
    terms.push_back(
        {{"field", t.field}, {"fitted", t.fitted}, {"before", t.before}, {"after", t.after}, {"note", t.note}});
  for (const CurveFit& f : c.curves)
    curves.push_back(
        {{"field", f.field}, {"fitted", f.fitted}, {"scale", f.scale}, {"offset_s", f.offset_s}, {"note", f.note}});
  return {{"terms", terms}, {"curves", curves}, {"coefficients", c.coefficients}};
}

}  // namespace llmplan
