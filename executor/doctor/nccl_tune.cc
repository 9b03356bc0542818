#include "executor/doctor/nccl_tune.h"

#include <stdio.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/format.h"  // FormatBytes
#include "base/user_error.h"
#include "executor/hardware/cuda_machine.h"
#include "executor/profile/nccl_collectives.h"

namespace llmplan::executor {

namespace {

std::string Quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int VisibleGpus() {
#ifdef LLMPLAN_WITH_CUDA
  return static_cast<int>(ProbeCudaMachine().devices.size());
#else
  return 0;
#endif
}

// Runs `command`, returns its stdout; `status` its exit status.
std::string Capture(const std::string& command, int& status) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    status = -1;
    return out;
  }
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int raw = ::pclose(pipe);
  status = raw >= 0 && WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

}  // namespace

NcclTuneResult RunNcclTuning(const StepProgram& program, const std::string& executable) {
  NcclTuneResult r;
  r.planned = PlannedCollectives(program);
  if (r.planned.empty()) {
    r.nothing_to_tune = "the plan runs no collective among several GPUs of a node: nothing to tune";
    return r;
  }
  int group = 0;
  for (const StepOp& op : program.ops)
    if (op.work.group_size > 1 && !op.work.spans_nodes) group = std::max(group, op.work.group_size);
  const int visible = VisibleGpus();
  if (visible < 2) {
    r.nothing_to_tune = visible == 1 ? "one GPU visible: NCCL's collectives need two or more, nothing to tune"
                                     : "no GPU visible (or a build without CUDA): nothing to tune";
    return r;
  }
  r.gpus = std::min(group, visible);
  std::vector<double> sizes;
  for (const PlannedCollective& c : r.planned)
    if (std::find(sizes.begin(), sizes.end(), c.bytes) == sizes.end()) sizes.push_back(c.bytes);
  std::string size_list;
  for (double s : sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(static_cast<long long>(s));

  r.tried = NcclSettingsToTry();
  for (const NcclSetting& setting : r.tried) {
    std::string command;
    for (const auto& [variable, value] : setting.variables) command += variable + "=" + Quoted(value) + " ";
    command += "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} " + Quoted(executable) + " doctor --tune-child --gpus " +
               std::to_string(r.gpus) + " --sizes " + size_list + " 2>&1";
    int status = 0;
    const std::string output = Capture(command, status);
    const std::string last = output.substr(output.rfind('\n', output.size() >= 2 ? output.size() - 2 : 0) + 1);
    nlohmann::json measured;
    try {
      if (status != 0) throw std::runtime_error("exited with status " + std::to_string(status));
      measured = nlohmann::json::parse(last);
      std::vector<double> seconds;
      for (const PlannedCollective& c : r.planned) {
        const size_t at = static_cast<size_t>(std::find(sizes.begin(), sizes.end(), c.bytes) - sizes.begin());
        seconds.push_back(measured.at(CollectiveOpName(c.op)).at(at).at(1).get<double>());
      }
      r.timings[setting.Name()] = seconds;
    } catch (const std::exception& e) {
      r.failed[setting.Name()] = std::string(e.what()) + ": " + last.substr(0, 300);
    }
  }
  if (!r.timings.count("default"))
    throw UserError("doctor --tune: NCCL's own choice could not be measured: " + r.failed["default"]);
  r.recommendation = RecommendNcclSetting(r.planned, r.tried, r.timings);
  return r;
}

void RunNcclTuneChild(int gpus, const std::vector<double>& sizes, std::ostream& out) {
#ifdef LLMPLAN_WITH_CUDA
  KeepNvlinkMulticastOff();
  std::vector<int> devices;
  for (int g = 0; g < gpus; ++g) devices.push_back(g);
  const CollectiveMeasurement m = MeasureCollectives(devices, sizes, 2, 10, [](int, int) {});
  out << nlohmann::json{{"all_gather", m.all_gather}, {"reduce_scatter", m.reduce_scatter}, {"all_reduce", m.all_reduce}}
             .dump()
      << "\n";
#else
  (void)gpus;
  (void)sizes;
  (void)out;
  throw UserError("doctor --tune-child measures NCCL collectives: this build has no CUDA");
#endif
}

std::string NcclTuneText(const NcclTuneResult& r) {
  std::ostringstream s;
  if (!r.nothing_to_tune.empty()) {
    s << "llmplan doctor --tune: " << r.nothing_to_tune << "\n";
    return s.str();
  }
  s << "llmplan doctor --tune: " << r.planned.size() << " collectives of the plan among " << r.gpus << " GPUs, "
    << r.tried.size() << " settings\n";
  const std::vector<double>& base = r.timings.at("default");
  for (size_t i = 0; i < r.planned.size(); ++i) {
    const PlannedCollective& c = r.planned[i];
    char line[320];
    std::snprintf(line, sizeof line, "  %-14s %10s x %3d a step: NCCL's choice %.3g ms, fastest %s (%+.1f%%)\n",
                  CollectiveOpName(c.op).c_str(), FormatBytes(c.bytes).c_str(), c.per_step, 1e3 * base[i],
                  r.recommendation.fastest[i].first.c_str(), -100 * r.recommendation.fastest[i].second);
    s << line;
  }
  for (const auto& [setting, why] : r.failed) s << "  " << setting << ": failed (" << why << ")\n";
  char total[320];
  if (r.recommendation.tuned) {
    std::snprintf(total, sizeof total,
                  "recommended: %s: the plan's collectives take %.3g ms a step against %.3g ms with NCCL's choice "
                  "(%.1f%% less)\n",
                  r.recommendation.setting.Name().c_str(), 1e3 * r.recommendation.best_step_s,
                  1e3 * r.recommendation.default_step_s,
                  100 * (1 - r.recommendation.best_step_s / r.recommendation.default_step_s));
  } else {
    std::snprintf(total, sizeof total,
                  "recommended: NCCL's own choice (no setting takes %.0f%% off the plan's %.3g ms of collectives a "
                  "step): nothing to set\n",
                  100 * kWorthSetting, 1e3 * r.recommendation.default_step_s);
  }
  s << total;
  return s.str();
}

}  // namespace llmplan::executor
