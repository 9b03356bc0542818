// llmplan calibrate: refits a hardware profile to measured runs (see
// feedback/calibration.h), writes it with a record of the fit, and reports
// the prediction error before and after, on the fitted runs and on runs held
// out of the fit.
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <algorithm>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "feedback/calibration.h"
#include "feedback/calibration_store.h"
#include "feedback/comparison_format.h"
#include "base/atomic_file.h"
#include "base/format.h"
#include "base/user_error.h"
#include "tools/cli/commands.h"
#include "tools/cli/version.h"

namespace llmplan::cli {

namespace {

struct CalibrateOptions {
  std::vector<std::string> runs, holdout;
  std::string profile, out;
  bool json = false;
  bool show = false, forget = false;  // the calibration store, not --runs
};

// One run held against its prediction on the starting and on the calibrated
// profile (llmplan compare's numbers).
struct RunReport {
  const CalibrationRun* run;
  Comparison before, after;
};

std::vector<RunReport> Report(const std::vector<CalibrationRun>& runs, const HardwareProfile& before,
                              const HardwareProfile& after) {
  std::vector<RunReport> out;
  for (const CalibrationRun& r : runs) out.push_back({&r, CompareOnProfile(r, before), CompareOnProfile(r, after)});
  return out;
}

// Mean and largest absolute step-time error.
std::pair<double, double> StepMapeAndMax(const std::vector<RunReport>& reports, bool after) {
  double sum = 0, worst = 0;
  for (const RunReport& r : reports) {
    const double e = std::abs((after ? r.after : r.before).step_time_s.error());
    sum += e;
    worst = std::max(worst, e);
  }
  return {reports.empty() ? 0 : sum / static_cast<double>(reports.size()), worst};
}

nlohmann::json ReportsToJson(const std::vector<RunReport>& reports) {
  nlohmann::json runs = nlohmann::json::array();
  for (const RunReport& r : reports)
    runs.push_back({{"dir", r.run->measured.dir},
                    {"plan", DescribePlan(r.before)},
                    {"before", ComparisonToJson(r.before)},
                    {"after", ComparisonToJson(r.after)}});
  const auto [mape_before, max_before] = StepMapeAndMax(reports, false);
  const auto [mape_after, max_after] = StepMapeAndMax(reports, true);
  return {{"runs", runs},
          {"step_time",
           {{"mape_before", mape_before},
            {"max_before", max_before},
            {"mape_after", mape_after},
            {"max_after", max_after}}}};
}

std::string AbsPercent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

std::string Padded(std::string text, size_t width) {
  if (text.size() < width) text.resize(width, ' ');
  return text + " ";
}

void PrintSteps(const std::string& title, const std::vector<RunReport>& reports) {
  std::cout << "\nStep time, " << title << "\n"
            << "  " << Padded("run", 34) << Padded("measured", 10) << Padded("before", 20) << "after\n";
  for (const RunReport& r : reports)
    std::cout << "  " << Padded(r.run->measured.dir + " (" + r.run->measured.plan.model.name + ")", 34)
              << Padded(FormatSeconds(r.before.step_time_s.measured), 10)
              << Padded(FormatSeconds(r.before.step_time_s.predicted) + " " + FormatError(r.before.step_time_s.error()),
                        20)
              << FormatSeconds(r.after.step_time_s.predicted) << " " << FormatError(r.after.step_time_s.error())
              << "\n";
  const auto [mape_before, max_before] = StepMapeAndMax(reports, false);
  const auto [mape_after, max_after] = StepMapeAndMax(reports, true);
  std::cout << "  " << Padded("MAPE / max", 34) << Padded("", 10)
            << Padded(AbsPercent(mape_before) + " / " + AbsPercent(max_before), 20) << AbsPercent(mape_after) << " / "
            << AbsPercent(max_after) << "\n";

  // Classes of ops (llmplan compare's), summed over the runs per step.
  std::vector<std::string> names;
  std::map<std::string, std::array<double, 4>> sums;  // ops, measured, predicted before, predicted after
  for (const RunReport& r : reports) {
    for (size_t k = 0; k < r.before.classes.size(); ++k) {
      const OpClassComparison& b = r.before.classes[k];
      if (!sums.count(b.name)) names.push_back(b.name);
      auto& sum = sums[b.name];
      sum[0] += b.ops;
      sum[1] += b.seconds.measured;
      sum[2] += b.seconds.predicted;
      sum[3] += r.after.classes[k].seconds.predicted;
    }
  }
  std::cout << "  " << Padded("class of ops (summed per step)", 34) << Padded("measured", 10) << Padded("before", 20)
            << "after\n";
  for (const std::string& name : names) {
    const auto& [ops, measured, before, after] = sums[name];
    const std::string label = ops > 0 ? name + " (" + std::to_string(static_cast<int>(ops)) + " ops)" : name;
    std::cout << "  " << Padded(label, 34) << Padded(FormatSeconds(measured), 10)
              << Padded(FormatError(RelativeError(before, measured)), 20) << FormatError(RelativeError(after, measured))
              << "\n";
  }
}

void PrintText(const Calibration& c, const HardwareProfile& start, const std::vector<RunReport>& fitted,
               const std::vector<RunReport>& held_out, const std::string& out) {
  std::cout << "llmplan calibrate: " << start.name << " -> " << c.profile.name << " from " << fitted.size()
            << " run(s), " << held_out.size() << " held out\n\nFitted\n";
  char line[512];
  for (const FittedTerm& t : c.terms) {
    if (!t.fitted) continue;
    std::snprintf(line, sizeof line, "  %-42s %-11.4g -> %-11.4g %s\n", t.field.c_str(), t.before, t.after,
                  t.note.c_str());
    std::cout << line;
  }
  for (const CurveFit& f : c.curves) {
    if (!f.fitted) continue;
    std::snprintf(line, sizeof line, "  %-42s x %.4g %+.3g us      %s\n", f.field.c_str(), f.scale, 1e6 * f.offset_s,
                  f.note.c_str());
    std::cout << line;
  }
  std::cout << "Kept\n";
  for (const FittedTerm& t : c.terms) {
    if (t.fitted) continue;
    std::snprintf(line, sizeof line, "  %-42s %-26.4g %s\n", t.field.c_str(), t.before, t.note.c_str());
    std::cout << line;
  }
  for (const CurveFit& f : c.curves)
    if (!f.fitted) std::cout << "  " << Padded(f.field, 42) << Padded("", 26) << f.note << "\n";

  PrintSteps("fitted runs", fitted);
  if (!held_out.empty()) PrintSteps("held-out runs", held_out);

  std::cout << "\nPeak memory, predicted vs measured (not fitted)\n"
            << "  " << Padded("run", 34) << Padded("allocated", 10) << "reserved\n";
  for (const auto* group : {&fitted, &held_out})
    for (const RunReport& r : *group)
      std::cout << "  " << Padded(r.run->measured.dir + (group == &held_out ? " (held out)" : ""), 34)
                << Padded(FormatError(r.before.peak_allocated_bytes.error()), 10)
                << FormatError(r.before.peak_reserved_bytes.error()) << "\n";
  std::cout << "  memory.margin_fraction = " << c.profile.memory_margin_fraction
            << " (the largest under-prediction on the fitted runs)\n\nwrote " << c.profile.name << " to " << out
            << "\n";
}

std::string StoreOrExplain() {
  const std::optional<std::string> store = CalibrationStoreDir();
  if (!store)
    throw UserError("the calibration store is off (LLMPLAN_CALIBRATION_DIR=off, or no HOME): set "
                    "LLMPLAN_CALIBRATION_DIR to a directory");
  return *store;
}

// --show: every entry of the store, grouped by hardware, with whether the
// fit on this machine uses it, and each hardware's fit.
void Show(const CalibrateOptions& o) {
  const std::string store = StoreOrExplain();
  const MachineIdentity here = ThisMachine(ThisBuild());
  std::vector<std::string> unreadable;
  const std::vector<StoreEntry> entries = ListStore(store, &unreadable);
  std::map<std::string, StoreFit> fits;
  for (const StoreEntry& e : entries) {
    if (fits.count(e.hardware) || (!o.profile.empty() && ProfileHardwareName(o.profile) != e.hardware)) continue;
    try {
      fits[e.hardware] = FitStore(store, LoadHardwareProfile(e.hardware), here);
    } catch (const UserError& error) {
      fits[e.hardware].notes.push_back(std::string("no fit: ") + error.what());
    }
  }
  auto state = [&](const StoreEntry& e) -> std::string {
    const StoreFit& f = fits[e.hardware];
    if (std::find(f.used.begin(), f.used.end(), e.dir) != f.used.end()) return "used";
    if (std::find(f.outliers.begin(), f.outliers.end(), e.dir) != f.outliers.end()) return "outlier";
    const std::string why = IdentityDifference(e.machine, here);
    return why.empty() ? "unusable" : "ignored: " + why;
  };
  if (o.json) {
    nlohmann::json j = {{"store", store}, {"hardware", nlohmann::json::object()}, {"unreadable", unreadable}};
    for (const auto& [hardware, f] : fits) {
      nlohmann::json runs = nlohmann::json::array();
      for (const StoreEntry& e : entries)
        if (e.hardware == hardware)
          runs.push_back({{"entry", e.dir}, {"run_dir", e.run_dir}, {"recorded_utc", e.recorded_utc}, {"model", e.model},
                          {"step_s", e.step_s}, {"state", state(e)}});
      j["hardware"][hardware] = {{"runs", runs},
                                 {"calibrated", f.profile.has_value()},
                                 {"held_out_step_error", std::isfinite(f.held_out_error) ? nlohmann::json(f.held_out_error) : nlohmann::json()},
                                 {"spread", std::isfinite(f.spread) ? nlohmann::json(f.spread) : nlohmann::json()},
                                 {"notes", f.notes}};
    }
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "llmplan calibrate: the calibration store " << store << "\n";
  if (fits.empty()) std::cout << "  no runs recorded" << (o.profile.empty() ? "" : " for " + o.profile) << "\n";
  for (const auto& [hardware, f] : fits) {
    std::cout << "\n" << hardware << ": ";
    if (f.profile && std::isfinite(f.held_out_error))
      std::cout << "calibrated on " << f.used.size() << " runs; held-out step error " << AbsPercent(f.held_out_error)
                << ", spread " << AbsPercent(f.spread) << "\n";
    else if (f.profile)
      std::cout << "calibrated on " << f.used.size() << " run\n";
    else
      std::cout << "not calibrated\n";
    for (const StoreEntry& e : entries)
      if (e.hardware == hardware)
        std::cout << "  " << Padded(e.recorded_utc, 21) << Padded(e.model, 18) << Padded(FormatSeconds(e.step_s), 10)
                  << Padded(state(e), 8) << e.run_dir << "\n";
    for (const std::string& note : f.notes) std::cout << "  note: " << note << "\n";
  }
  for (const std::string& u : unreadable) std::cout << "unreadable entry: " << u << "\n";
}

void Forget(const CalibrateOptions& o) {
  const std::string store = StoreOrExplain();
  const std::string hardware = o.profile.empty() ? "" : ProfileHardwareName(o.profile);
  const int removed = ForgetStore(store, hardware);
  std::cout << "llmplan calibrate: forgot " << removed << " recorded run(s)"
            << (hardware.empty() ? "" : " of " + hardware) << " in " << store << "\n";
}

void Run(const CalibrateOptions& o) {
  if (o.show && o.forget) throw UserError("give --show or --forget, not both");
  if (o.show || o.forget) {
    if (!o.runs.empty() || !o.holdout.empty() || !o.out.empty())
      throw UserError(std::string(o.show ? "--show" : "--forget") +
                      " works on the calibration store: drop --runs, --holdout and --out");
    return o.show ? Show(o) : Forget(o);
  }
  if (o.runs.empty()) throw UserError("give --runs RUN_DIR... (and -o FILE), or --show / --forget for the store");
  if (o.out.empty()) throw UserError("give -o FILE: where to write the calibrated profile");
  std::error_code ec;
  std::vector<std::string> dirs = o.runs;
  dirs.insert(dirs.end(), o.holdout.begin(), o.holdout.end());
  for (size_t i = 0; i < dirs.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (std::filesystem::equivalent(dirs[i], dirs[k], ec))
        throw UserError("run " + dirs[i] + " is given twice: a run is fitted or held out, once");
  std::vector<MeasuredRun> fit_runs, held_runs;
  for (const auto& dir : o.runs) fit_runs.push_back(LoadMeasuredRun(dir));
  for (const auto& dir : o.holdout) held_runs.push_back(LoadMeasuredRun(dir));
  std::vector<const MeasuredRun*> all;
  for (const auto* group : {&fit_runs, &held_runs})
    for (const MeasuredRun& r : *group) all.push_back(&r);
  HardwareProfile start;
  if (!o.profile.empty()) {
    start = LoadHardwareProfile(o.profile);
  } else {
    try {
      start = LoadHardwareProfile(fit_runs.front().plan.profile);
    } catch (const UserError& e) {
      throw UserError(std::string(e.what()) + " (named by " + fit_runs.front().dir + "/plan.json; give --profile)");
    }
  }
  CheckOneKindOfHardware(all, start);

  std::vector<CalibrationRun> fit, held_out;
  for (MeasuredRun& r : fit_runs) fit.push_back(PrepareCalibrationRun(std::move(r), start));
  for (MeasuredRun& r : held_runs) held_out.push_back(PrepareCalibrationRun(std::move(r), start));
  const Calibration c = Calibrate(start, fit);
  const std::vector<RunReport> fitted_reports = Report(fit, start, c.profile);
  const std::vector<RunReport> held_reports = Report(held_out, start, c.profile);

  nlohmann::json record = CalibrationToJson(c);
  record["from_profile"] = start.name;
  record["fitted_runs"] = ReportsToJson(fitted_reports);
  record["held_out_runs"] = ReportsToJson(held_reports);
  nlohmann::json profile = HardwareProfileToJson(c.profile);
  profile["calibration"] = record;  // the profile reader ignores keys it does not know
  WriteFileAtomically(o.out, profile.dump(2) + "\n", "the calibrated profile");

  if (o.json) {
    std::cout << nlohmann::json{{"profile", c.profile.name}, {"written_to", o.out}, {"calibration", record}}.dump(2)
              << "\n";
  } else {
    PrintText(c, start, fitted_reports, held_reports, o.out);
  }
}

}  // namespace

void AddCalibrateCommand(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Refit a hardware profile to measured runs (llmplan run --out), or show the calibration store");
  cmd->add_option("--runs", o->runs, "Run directories to fit the profile to");
  cmd->add_option("--holdout", o->holdout, "Run directories to report the error on, not fitted to");
  cmd->add_option("--profile", o->profile,
                  "Starting profile, name or path (default: the runs' plans' profile); with --show or --forget: "
                  "only that hardware");
  cmd->add_option("-o,--out", o->out, "Write the calibrated profile here (with --runs)");
  cmd->add_flag("--show", o->show,
                "List the runs this machine recorded (the calibration store: $LLMPLAN_CALIBRATION_DIR, else "
                "$XDG_DATA_HOME/llmplan/calibration), which the fit uses, and its held-out error");
  cmd->add_flag("--forget", o->forget, "Remove the recorded runs from the calibration store");
  cmd->add_flag("--json", o->json, "Print JSON instead of text");
  cmd->callback([o] { Run(*o); });
}

}  // namespace llmplan::cli
