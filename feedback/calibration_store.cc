#include "feedback/calibration_store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/atomic_file.h"
#include "base/json_read.h"
#include "base/user_error.h"

namespace llmplan {

namespace fs = std::filesystem;

namespace {

constexpr const char* kEntryFormat = "llmplan-calibration-entry-1";
constexpr const char* kFitFormat = "llmplan-calibration-fit-1";
// The op_times lines an entry keeps: enough timed steps for a mean that one
// noisy step does not carry, few enough that an entry of an 8B model stays
// near a MiB.
constexpr size_t kKeptSteps = 8;
// A run is the odd one out only when its held-out error is this far from the
// others' (and 3 robust deviations): steps of one plan vary a few percent
// from run to run (allocator, clocks, the host's other work), while what the
// fit must not take in is of another size: a host AdamW 20% slower for a day.
constexpr double kOutlierFloor = 0.08;

std::string FirstLineOf(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string Trimmed(std::string s) {
  const size_t b = s.find_first_not_of(" \t:");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string NowUtc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// The raw lines of a JSON-lines file with each line's "step".
std::vector<std::pair<int64_t, std::string>> StepLines(const std::string& path) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    out.emplace_back(j["step"].get<int64_t>(), line);
  }
  return out;
}

double MeanTimedStep(const MeasuredRun& run) {
  const auto timed = run.TimedSteps();
  double sum = 0;
  for (const MeasuredStep* s : timed) sum += s->step_s;
  return timed.empty() ? 0 : sum / static_cast<double>(timed.size());
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Calibrate without its UserError: nullopt when nothing could be fitted.
std::optional<HardwareProfile> FitOrNothing(const HardwareProfile& start, const std::vector<CalibrationRun>& runs) {
  if (runs.empty()) return std::nullopt;
  try {
    return Calibrate(start, runs).profile;
  } catch (const UserError&) {
    return std::nullopt;
  }
}

StoreFit FitFromJson(const nlohmann::json& j, const std::string& context) {
  StoreFit f;
  const JsonObject o(j, context);
  f.hardware = o.String("hardware");
  if (j.contains("profile") && j["profile"].is_object()) f.profile = HardwareProfileFromJson(j["profile"], context);
  for (const char* key : {"used", "outliers", "notes"}) {
    auto& list = std::string(key) == "used" ? f.used : std::string(key) == "outliers" ? f.outliers : f.notes;
    if (j.contains(key) && j[key].is_array())
      for (const auto& s : j[key])
        if (s.is_string()) list.push_back(s.get<std::string>());
  }
  f.held_out_error = j.contains("held_out_error") && j["held_out_error"].is_number() ? j["held_out_error"].get<double>() : NAN;
  f.spread = j.contains("spread") && j["spread"].is_number() ? j["spread"].get<double>() : NAN;
  return f;
}

nlohmann::json FitToJson(const StoreFit& f, const nlohmann::json& key) {
  nlohmann::json j = {{"format", kFitFormat}, {"key", key}, {"hardware", f.hardware}, {"used", f.used},
                      {"outliers", f.outliers}, {"notes", f.notes}};
  j["profile"] = f.profile ? HardwareProfileToJson(*f.profile) : nlohmann::json(nullptr);
  j["held_out_error"] = std::isfinite(f.held_out_error) ? nlohmann::json(f.held_out_error) : nlohmann::json(nullptr);
  j["spread"] = std::isfinite(f.spread) ? nlohmann::json(f.spread) : nlohmann::json(nullptr);
  return j;
}

}  // namespace

// ---------------------------------------------------------------------------
// The machine

MachineIdentity ThisMachine(const BuildVersions& build) {
  MachineIdentity m;
  m.build = build;
  std::error_code ec;
  // The NVIDIA driver describes each GPU it drives without CUDA being loaded.
  const fs::path gpus("/proc/driver/nvidia/gpus");
  std::vector<std::string> models;
  for (fs::directory_iterator it(gpus, ec), end; !ec && it != end; it.increment(ec)) {
    std::ifstream in(it->path() / "information");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("Model:", 0) == 0) models.push_back(Trimmed(line.substr(6)));
  }
  if (!models.empty()) {
    std::sort(models.begin(), models.end());
    m.gpu_model = models.front() == models.back() ? models.front() : models.front() + " and others";
    m.gpus = static_cast<int>(models.size());
  }
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  560.35.03  Fri Aug ..."
  const std::string nvrm = FirstLineOf("/proc/driver/nvidia/version");
  if (const size_t k = nvrm.find("Kernel Module"); k != std::string::npos) {
    std::istringstream words(nvrm.substr(k + 13));
    words >> m.driver;
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string model;
  int cpus = 0;
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("processor", 0) == 0) ++cpus;
    if (model.empty() && line.rfind("model name", 0) == 0) model = Trimmed(line.substr(line.find(':') + 1));
  }
  if (model.empty()) model = "unknown CPU";
  m.host_cpu = model + " x " + std::to_string(std::max(1, cpus));
  return m;
}

nlohmann::json MachineIdentityToJson(const MachineIdentity& m) {
  return {{"gpu_model", m.gpu_model}, {"gpus", m.gpus},   {"driver", m.driver},     {"host_cpu", m.host_cpu},
          {"llmplan", m.build.llmplan}, {"torch", m.build.torch}, {"cuda", m.build.cuda}, {"nccl", m.build.nccl}};
}

MachineIdentity MachineIdentityFromJson(const nlohmann::json& j, const std::string& context) {
  const JsonObject o(j, context);
  MachineIdentity m;
  m.gpu_model = o.String("gpu_model");
  m.gpus = static_cast<int>(o.Integer("gpus", 0, 1 << 16));
  m.driver = o.String("driver");
  m.host_cpu = o.String("host_cpu");
  m.build = {o.String("llmplan"), o.String("torch"), o.String("cuda"), o.String("nccl")};
  return m;
}

std::string IdentityDifference(const MachineIdentity& entry, const MachineIdentity& here) {
  std::vector<std::string> diffs;
  auto differ = [&](const std::string& what, const std::string& now, const std::string& then) {
    if (now != then) diffs.push_back(what + " " + (now.empty() ? "none" : now) + " (recorded with " + (then.empty() ? "none" : then) + ")");
  };
  differ("llmplan", here.build.llmplan, entry.build.llmplan);
  differ("GPU", here.gpu_model, entry.gpu_model);
  differ("GPUs on the node", std::to_string(here.gpus), std::to_string(entry.gpus));
  differ("host CPU", here.host_cpu, entry.host_cpu);
  differ("driver", here.driver, entry.driver);
  differ("LibTorch", here.build.torch, entry.build.torch);
  differ("CUDA", here.build.cuda, entry.build.cuda);
  differ("NCCL", here.build.nccl, entry.build.nccl);
  std::string out;
  for (const std::string& d : diffs) out += (out.empty() ? "" : ", ") + d;
  return out;
}

std::optional<std::string> CalibrationStoreDir() {
  if (const char* dir = std::getenv("LLMPLAN_CALIBRATION_DIR"); dir != nullptr && *dir != '\0')
    return std::string(dir) == "off" ? std::nullopt : std::optional<std::string>(dir);
  if (const char* data = std::getenv("XDG_DATA_HOME"); data != nullptr && *data == '/')
    return (fs::path(data) / "llmplan" / "calibration").string();
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/')
    return (fs::path(home) / ".local" / "share" / "llmplan" / "calibration").string();
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Entries

std::vector<StoreEntry> ListStore(const std::string& store, std::vector<std::string>* skipped) {
  std::vector<StoreEntry> out;
  std::error_code ec;
  for (fs::directory_iterator hw(store, ec), end; !ec && hw != end; hw.increment(ec)) {
    if (!hw->is_directory()) continue;
    std::error_code ec2;
    for (fs::directory_iterator e(hw->path(), ec2), end2; !ec2 && e != end2; e.increment(ec2)) {
      if (!e->is_directory()) continue;
      const std::string path = (e->path() / "entry.json").string();
      try {
        const nlohmann::json j = ReadJsonFile(path, "calibration entry");
        const JsonObject o(j, path);
        if (o.String("format") != kEntryFormat) throw UserError(path + ": format is not " + kEntryFormat);
        StoreEntry entry;
        entry.dir = e->path().string();
        entry.hardware = hw->path().filename().string();
        entry.run_dir = o.String("run_dir", "");
        entry.recorded_utc = o.String("recorded_utc", "");
        entry.model = o.String("model", "");
        entry.step_s = o.Number("step_s", 0);
        entry.machine = MachineIdentityFromJson(o.Raw("machine"), path + ": machine");
        out.push_back(std::move(entry));
      } catch (const UserError& error) {
        if (skipped) skipped->push_back(error.what());
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const StoreEntry& a, const StoreEntry& b) {
    return a.recorded_utc != b.recorded_utc ? a.recorded_utc < b.recorded_utc : a.dir < b.dir;
  });
  return out;
}

int ForgetStore(const std::string& store, const std::string& hardware) {
  int removed = 0;
  for (const StoreEntry& e : ListStore(store)) {
    if (!hardware.empty() && e.hardware != hardware) continue;
    std::error_code ec;
    fs::remove_all(e.dir, ec);
    if (ec) throw UserError("cannot remove " + e.dir + ": " + ec.message());
    ++removed;
  }
  std::error_code ec;
  for (fs::directory_iterator hw(store, ec), end; !ec && hw != end; hw.increment(ec)) {
    if (!hardware.empty() && hw->path().filename() != hardware) continue;
    std::error_code ignored;
    fs::remove(hw->path() / "fit.json", ignored);
    fs::remove(hw->path(), ignored);  // only when empty
  }
  return removed;
}

// ---------------------------------------------------------------------------
// The fit

StoreFit FitStore(const std::string& store, const HardwareProfile& start, const MachineIdentity& here,
                  size_t most_entries) {
  StoreFit fit;
  fit.hardware = ProfileHardwareName(start.name);
  std::vector<std::string> unreadable;
  std::vector<StoreEntry> entries;
  std::map<std::string, int> ignored;  // reason -> entries
  for (StoreEntry& e : ListStore(store, &unreadable)) {
    if (e.hardware != fit.hardware) continue;
    const std::string why = IdentityDifference(e.machine, here);
    if (!why.empty()) {
      ++ignored[why];
      continue;
    }
    entries.push_back(std::move(e));
  }
  // Notes on entries of other setups are made fresh each time (they are not
  // part of the cache's key); the fit's own notes are cached with it.
  std::vector<std::string> setup_notes;
  for (const auto& [why, count] : ignored)
    setup_notes.push_back("ignored " + std::to_string(count) + " run(s) recorded on another setup: " + why);
  if (most_entries > 0 && entries.size() > most_entries) {  // ListStore: oldest first
    setup_notes.push_back("fitted the newest " + std::to_string(most_entries) + " of " +
                          std::to_string(entries.size()) + " runs recorded (calibrate --forget clears the store)");
    entries.erase(entries.begin(), entries.end() - static_cast<std::ptrdiff_t>(most_entries));
  }
  fit.notes = setup_notes;
  if (entries.empty()) return fit;

  // The cache holds while the entries, the start and the machine are the same.
  nlohmann::json key = {
      {"store", store}, {"start", HardwareProfileToJson(start)}, {"machine", MachineIdentityToJson(here)}};
  for (const StoreEntry& e : entries) key["entries"].push_back(fs::path(e.dir).filename().string());
  const std::string cache = (fs::path(store) / fit.hardware / "fit.json").string();
  {
    std::ifstream in(cache);
    const nlohmann::json j = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (j.is_object() && j.value("format", "") == kFitFormat && j.contains("key") && j["key"] == key) {
      try {
        StoreFit cached = FitFromJson(j, cache);
        cached.notes.insert(cached.notes.begin(), setup_notes.begin(), setup_notes.end());
        return cached;
      } catch (const UserError&) {
        // refit below
      }
    }
  }

  std::vector<CalibrationRun> runs;
  std::vector<std::string> dirs;
  int unusable = 0;
  for (const StoreEntry& e : entries) {
    try {
      runs.push_back(PrepareCalibrationRun(LoadMeasuredRun(e.dir), start));
      dirs.push_back(e.dir);
    } catch (const UserError&) {
      ++unusable;
    }
  }
  if (unusable > 0)
    fit.notes.push_back("ignored " + std::to_string(unusable) + " run(s) whose files no longer match their plan");

  // The odd runs out, one at a time: fit every run still in; the runs the
  // fit misses by more than max(3 robust deviations, kOutlierFloor) from the
  // median miss are suspects; of those, the one the others predict worst
  // (fitted without it) leaves, and the rest are refitted. A run that is
  // alone in exercising a term is fitted exactly and never a suspect; two
  // runs of one plan that disagree are told apart by the others.
  std::vector<size_t> active(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) active[i] = i;
  auto fit_of = [&](const std::vector<size_t>& which, size_t without) {
    std::vector<CalibrationRun> subset;
    for (size_t i : which)
      if (i != without) subset.push_back(runs[i]);
    return FitOrNothing(start, subset);
  };
  auto step_error = [&](size_t i, const HardwareProfile& p) { return CompareOnProfile(runs[i], p).step_time_s.error(); };
  std::optional<HardwareProfile> profile = fit_of(active, runs.size());
  while (profile && active.size() >= 3) {
    std::vector<double> residuals;
    for (size_t i : active) residuals.push_back(step_error(i, *profile));
    const double median = Median(residuals);
    std::vector<double> deviations;
    for (double r : residuals) deviations.push_back(std::abs(r - median));
    const double limit = std::max(3 * 1.4826 * Median(deviations), kOutlierFloor);
    size_t worst = runs.size();
    double worst_error = kOutlierFloor;
    for (size_t k = 0; k < active.size(); ++k) {
      if (std::abs(residuals[k] - median) <= limit) continue;
      const auto others = fit_of(active, active[k]);
      const double e = others ? std::abs(step_error(active[k], *others)) : 0;
      if (e > worst_error) worst = active[k], worst_error = e;
    }
    if (worst == runs.size()) break;
    fit.outliers.push_back(dirs[worst]);
    active.erase(std::find(active.begin(), active.end(), worst));
    profile = fit_of(active, runs.size());
  }
  if (!fit.outliers.empty())
    fit.notes.push_back("left out " + std::to_string(fit.outliers.size()) +
                        " run(s) that disagree with the others (llmplan calibrate --show names them)");
  fit.profile = profile;
  if (!fit.profile) {
    fit.notes.push_back("the recorded runs exercise no term a fit can identify");
  } else {
    std::vector<double> held_out, residuals;
    for (size_t i : active) {
      fit.used.push_back(dirs[i]);
      residuals.push_back(std::abs(step_error(i, *fit.profile)));
      if (active.size() >= 2)
        if (const auto others = fit_of(active, i)) held_out.push_back(std::abs(step_error(i, *others)));
    }
    // Held out: each run predicted by the fit of the others (a run alone in
    // exercising a term is predicted from the shipped value of that term).
    // Spread: how far the runs stray from the fit that has them all.
    if (!held_out.empty()) fit.held_out_error = Median(held_out);
    if (active.size() >= 2) fit.spread = *std::max_element(residuals.begin(), residuals.end());
  }
  StoreFit to_cache = fit;
  to_cache.notes.erase(to_cache.notes.begin(), to_cache.notes.begin() + static_cast<std::ptrdiff_t>(setup_notes.size()));
  try {
    WriteFileAtomically(cache, FitToJson(to_cache, key).dump(1) + "\n", "calibration fit");
  } catch (const UserError&) {
    // A cache that cannot be written only costs the next estimate a refit.
  }
  return fit;
}

double DisagreementThreshold(const StoreFit& fit) {
  return fit.profile && std::isfinite(fit.spread) ? std::max(fit.spread, 0.03) : 0.05;
}

// ---------------------------------------------------------------------------
// Recording

RunAgainstStore RecordRun(const std::string& store, const std::string& run_dir, const MachineIdentity& here,
                          std::string* entry_dir) {
  MeasuredRun run = LoadMeasuredRun(run_dir);
  if (run.steps.size() < 3)
    throw UserError("it ran " + std::to_string(run.steps.size()) +
                    " step(s): a run needs 3 or more for a step past its warm-up");
  const HardwareProfile start = LoadHardwareProfile(run.plan.profile);
  const CalibrationRun prepared = PrepareCalibrationRun(run, start);  // throws when the program does not match

  RunAgainstStore against;
  const StoreFit fit = FitStore(store, start, here);
  if (fit.profile) {
    against.compared = true;
    against.runs = static_cast<int>(fit.used.size());
    const Comparison c = CompareOnProfile(prepared, *fit.profile);
    against.predicted_s = c.step_time_s.predicted;
    against.measured_s = c.step_time_s.measured;
    against.error = c.step_time_s.error();
    against.threshold = DisagreementThreshold(fit);
    against.disagrees = std::abs(against.error) > against.threshold;
  }

  const std::string hardware = ProfileHardwareName(start.name);
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, "-%d-%lld", static_cast<int>(::getpid()),
                static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000007));
  std::string stamp = NowUtc();
  std::replace(stamp.begin(), stamp.end(), ':', '-');
  const fs::path dir = fs::path(store) / hardware / (stamp + suffix);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError("cannot create " + dir.string() + ": " + ec.message());
  try {
    for (const char* name : {"plan.json", "program.json", "summary.json"}) {
      const fs::path from = fs::path(run_dir) / name;
      if (fs::exists(from, ec)) fs::copy_file(from, dir / name, fs::copy_options::overwrite_existing);
    }
    // op_times: the last kKeptSteps steps; metrics: those steps and the run's
    // first two, which say which steps were the warm-up (measured_run.h).
    auto times = StepLines((fs::path(run_dir) / "op_times.jsonl").string());
    if (times.size() > kKeptSteps) times.erase(times.begin(), times.end() - static_cast<std::ptrdiff_t>(kKeptSteps));
    std::set<int64_t> steps;
    std::string text;
    for (const auto& [step, line] : times) {
      steps.insert(step);
      text += line + "\n";
    }
    WriteFileAtomically((dir / "op_times.jsonl").string(), text, "calibration entry");
    const auto metrics = StepLines((fs::path(run_dir) / "metrics.jsonl").string());
    std::set<int64_t> first;
    for (const auto& [step, line] : metrics) first.insert(step);
    while (first.size() > 2) first.erase(std::prev(first.end()));
    text.clear();
    for (const auto& [step, line] : metrics)
      if (steps.count(step) || first.count(step)) text += line + "\n";
    WriteFileAtomically((dir / "metrics.jsonl").string(), text, "calibration entry");
    nlohmann::json entry = {{"format", kEntryFormat},
                            {"recorded_utc", NowUtc()},
                            {"run_dir", fs::absolute(run_dir, ec).string()},
                            {"model", run.plan.model.name},
                            {"profile", run.plan.profile},
                            {"step_s", MeanTimedStep(run)},
                            {"machine", MachineIdentityToJson(here)}};
    if (against.compared)
      entry["against_store"] = {{"runs", against.runs}, {"predicted_s", against.predicted_s}, {"error", against.error},
                                {"disagrees", against.disagrees}};
    // entry.json last: an entry without it is not listed (a record cut short).
    WriteFileAtomically((dir / "entry.json").string(), entry.dump(1) + "\n", "calibration entry");
  } catch (const std::exception& e) {
    fs::remove_all(dir, ec);
    throw UserError(std::string("cannot write ") + dir.string() + ": " + e.what());
  }
  if (entry_dir) *entry_dir = dir.string();
  return against;
}

}  // namespace llmplan
