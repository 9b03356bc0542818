#include "feedback/measured_run.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "base/json_read.h"
#include "base/user_error.h"

namespace llmplan {

namespace {

std::vector<RecordedOp> ReadProgram(const std::string& path) {
  const nlohmann::json j = ReadJsonFile(path, "step program");
  const JsonObject top(j, path);
  if (!top.Has("ops") || !top.Raw("ops").is_array()) top.Fail("ops", "missing or not a list");
  std::vector<RecordedOp> ops;
  for (const auto& raw : top.Raw("ops")) {
    const JsonObject o(raw, path + ": op " + std::to_string(ops.size()));
    RecordedOp op;
    op.id = static_cast<int>(o.Integer("id", 0, 1 << 30));
    if (op.id != static_cast<int>(ops.size())) o.Fail("id", "ops must be listed by id, from 0");
    op.name = o.String("name");
    op.kind = o.String("kind");
    op.stream = o.String("stream");
    op.group = o.String("group", "none");
    op.unit = static_cast<int>(o.Integer("unit", -1, 1 << 30));
    op.micro_batch = static_cast<int>(o.Integer("micro_batch", -1, 1 << 30));
    if (o.Has("deps")) {
      if (!o.Raw("deps").is_array()) o.Fail("deps", "not a list");
      for (const auto& d : o.Raw("deps")) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() >= op.id)
          o.Fail("deps", "must name earlier ops");
        op.deps.push_back(d.get<int>());
      }
    }
    ops.push_back(std::move(op));
  }
  if (ops.empty()) top.Fail("ops", "the program has no ops");
  return ops;
}

// Reads JSON lines; a torn last line (the run died mid-write) is dropped.
std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0)
    throw UserError("cannot read " + path + ": is it a directory written by llmplan run?");
  // A long run's op_times.jsonl is tens of MiB; 1 GiB is no run's.
  std::istringstream in(ReadInputFile(path, "run record", int64_t{1} << 30));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  std::vector<nlohmann::json> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      if (i + 1 == lines.size()) break;  // the run stopped while writing it
      throw UserError(path + ": line " + std::to_string(i + 1) + " is not a JSON object");
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<double> NumberArray(const JsonObject& o, const std::string& key, size_t n) {
  if (!o.Has(key) || !o.Raw(key).is_array()) o.Fail(key, "missing or not a list");
  const nlohmann::json& a = o.Raw(key);
  if (a.size() != n)
    o.Fail(key, "has " + std::to_string(a.size()) + " values for a program of " + std::to_string(n) + " ops");
  std::vector<double> v;
  v.reserve(n);
  for (const auto& x : a) {
    if (!x.is_number()) o.Fail(key, "holds a value that is not a number");
    v.push_back(x.get<double>());
  }
  return v;
}

}  // namespace

double MeasuredStep::OpsMakespan() const {
  double end = 0;
  for (const auto& op : ops) end = std::max(end, op.end_s);
  return end;
}

std::vector<OpTiming> MeasuredStep::Spans() const {
  std::vector<OpTiming> spans;
  spans.reserve(ops.size());
  for (const MeasuredOp& op : ops) spans.push_back({op.start_s, op.end_s});
  return spans;
}

std::vector<const MeasuredStep*> MeasuredRun::TimedSteps() const {
  // The first step grows the allocator's segments and picks kernels; on
  // several GPUs the second still connects NCCL's channels for new sizes
  // (measured on 2 x H200: 0.58 s against 0.37 s steady). Runs of 4 steps or
  // more leave both out.
  // A kernel-traced step is left out too: the profiler's per-op host work
  // made it 1.7x as long on the 1B plan (445 ms against 255), which would
  // read as host overhead in a comparison and in the calibrated profile.
  std::vector<const MeasuredStep*> out;
  for (const MeasuredStep& s : steps)
    if (!s.warm_up && !s.kernel_traced) out.push_back(&s);
  if (out.empty() && !steps.empty()) out.push_back(&steps.back());  // a run of nothing but its traced step
  return out;
}

double MeasuredRun::MeanSeconds(int op) const {
  const auto timed = TimedSteps();
  double sum = 0;
  for (const MeasuredStep* s : timed) sum += s->ops.at(op).seconds();
  return timed.empty() ? 0 : sum / static_cast<double>(timed.size());
}

MeasuredRun LoadMeasuredRun(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UserError("run directory '" + dir + "' does not exist (give the --out of an llmplan run)");
  MeasuredRun run;
  run.dir = dir;
  const std::string plan_path = (fs::path(dir) / "plan.json").string();
  if (!fs::exists(plan_path, ec))
    throw UserError(dir + " has no plan.json: it was not written by this llmplan run (or by an older one)");
  run.plan = LoadPlan(plan_path);
  run.program = ReadProgram((fs::path(dir) / "program.json").string());
  const size_t n = run.program.size();

  std::map<int64_t, nlohmann::json> metrics;
  for (auto& j : ReadJsonLines((fs::path(dir) / "metrics.jsonl").string())) {
    // The step is read before the move: json's operator= takes its argument
    // by value, and C++17 builds that argument before evaluating the left side.
    const int64_t step = JsonObject(j, dir + "/metrics.jsonl").Integer("step", 0, int64_t{1} << 40);
    metrics[step] = std::move(j);
  }
  const std::string times_path = (fs::path(dir) / "op_times.jsonl").string();
  for (const auto& j : ReadJsonLines(times_path)) {
    const JsonObject o(j, times_path + ": step " + (j.contains("step") ? j["step"].dump() : "?"));
    MeasuredStep s;
    s.step = o.Integer("step", 0, int64_t{1} << 40);
    auto m = metrics.find(s.step);
    if (m == metrics.end()) continue;  // its metrics line was lost: the run died in between
    const auto start = NumberArray(o, "start_s", n), end = NumberArray(o, "end_s", n);
    const auto issued = NumberArray(o, "issued_s", n), allocated = NumberArray(o, "allocated", n);
    const auto reserved = NumberArray(o, "reserved", n), peak_allocated = NumberArray(o, "peak_allocated", n);
    const auto peak_reserved = NumberArray(o, "peak_reserved", n);
    s.ops.resize(n);
    for (size_t i = 0; i < n; ++i) {
      s.ops[i] = {start[i], end[i], issued[i], allocated[i], reserved[i], peak_allocated[i], peak_reserved[i]};
    }
    s.memory_source = o.String("memory_source", "");
    const JsonObject mo(m->second, dir + "/metrics.jsonl: step " + std::to_string(s.step));
    s.loss = mo.Number("loss", 0);
    s.step_s = mo.Number("step_s", 0);
    s.data_s = mo.Number("data_s", 0);
    s.tokens_per_s_per_gpu = mo.Number("tokens_per_s_per_gpu", 0);
    s.mfu = mo.Number("mfu", 0);
    s.hfu = mo.Number("hfu", 0);
    s.peak_allocated = mo.Number("peak_allocated_bytes", 0);
    s.peak_reserved = mo.Number("peak_reserved_bytes", 0);
    s.kernel_traced = mo.Bool("kernel_traced", false);
    run.steps.push_back(std::move(s));
  }
  if (run.steps.empty()) throw UserError(dir + " holds no finished step (op_times.jsonl and metrics.jsonl)");
  // Warm-up (TimedSteps): as many steps as the measured ones leave room for,
  // taken from the start of the run as metrics.jsonl lists it, not of
  // op_times.jsonl, which a recording may keep only the last lines of (a
  // resumed run appends to both: these are its first process's).
  const size_t warm_up_count = run.steps.size() >= 4 ? 2 : (run.steps.size() > 1 ? 1 : 0);
  std::set<int64_t> warm_up;
  for (auto it = metrics.begin(); it != metrics.end() && warm_up.size() < warm_up_count; ++it) warm_up.insert(it->first);
  for (MeasuredStep& s : run.steps) s.warm_up = warm_up.count(s.step) > 0;
  // Runs written before metrics.jsonl said which step was kernel-traced:
  // the trace's summary names it.
  const std::string kernel_profile_path = (fs::path(dir) / "kernel_profile.json").string();
  if (fs::exists(kernel_profile_path, ec)) {
    const nlohmann::json j = ReadJsonFile(kernel_profile_path, "kernel profile");
    const int64_t traced = JsonObject(j, kernel_profile_path).Integer("step", 0, int64_t{1} << 40, 0);
    for (MeasuredStep& s : run.steps)
      if (s.step == traced) s.kernel_traced = true;
  }
  const std::string summary_path = (fs::path(dir) / "summary.json").string();
  if (fs::exists(summary_path, ec)) {
    const nlohmann::json j = ReadJsonFile(summary_path, "run summary");
    const JsonObject o(j, summary_path);
    run.device = o.String("device", "");
    run.attention_backend = o.String("attention_backend", "");
  }
  return run;
}

void CheckSameProgram(const MeasuredRun& run, const StepProgram& program) {
  const std::string hint = " (made by another llmplan version, or the plan changed after the run): run it again";
  if (program.ops.size() != run.program.size())
    throw UserError("the run in " + run.dir + " executed " + std::to_string(run.program.size()) +
                    " ops, its plan's program has " + std::to_string(program.ops.size()) + hint);
  for (size_t i = 0; i < program.ops.size(); ++i) {
    if (program.ops[i].name != run.program[i].name)
      throw UserError("the run in " + run.dir + " executed \"" + run.program[i].name + "\" as op " +
                      std::to_string(i) + ", its plan's program has \"" + program.ops[i].name + "\"" + hint);
  }
}

}  // namespace llmplan
