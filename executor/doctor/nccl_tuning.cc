#include "executor/doctor/nccl_tuning.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace llmplan::executor {

std::string NcclSetting::Name() const {
  if (variables.empty()) return "default";
  std::string name;
  for (const auto& [variable, value] : variables) name += (name.empty() ? "" : " ") + variable + "=" + value;
  return name;
}

std::vector<NcclSetting> NcclSettingsToTry() {
  std::vector<NcclSetting> settings = {NcclSetting{}};
  for (const char* algo : {"Ring", "Tree"})
    for (const char* proto : {"Simple", "LL", "LL128"})
      settings.push_back({{{"NCCL_ALGO", algo}, {"NCCL_PROTO", proto}}});
  // Channels: NCCL picks a count per topology; fewer leave SMs to the GEMMs
  // beside the collective, more can fill a fast link with small messages.
  settings.push_back({{{"NCCL_MAX_NCHANNELS", "8"}}});
  settings.push_back({{{"NCCL_MIN_NCHANNELS", "32"}}});
  return settings;
}

std::vector<PlannedCollective> PlannedCollectives(const StepProgram& program) {
  std::vector<PlannedCollective> planned;
  for (const StepOp& op : program.ops) {
    const bool collective = op.kind == OpKind::kAllGather || op.kind == OpKind::kReduceScatter ||
                            op.kind == OpKind::kAllReduce || op.kind == OpKind::kAllReduceGradNorm ||
                            op.kind == OpKind::kAllReduceLoss;
    if (!collective || op.work.group_size <= 1 || op.work.spans_nodes || op.work.collective_bytes <= 0) continue;
    auto same = std::find_if(planned.begin(), planned.end(), [&](const PlannedCollective& c) {
      return c.op == op.work.collective && c.bytes == op.work.collective_bytes;
    });
    if (same == planned.end()) same = planned.insert(planned.end(), {op.work.collective, op.work.collective_bytes, 0});
    ++same->per_step;
  }
  return planned;
}

NcclRecommendation RecommendNcclSetting(const std::vector<PlannedCollective>& planned,
                                        const std::vector<NcclSetting>& tried, const NcclTimings& timings) {
  auto step_seconds = [&](const std::vector<double>& seconds) {
    double total = 0;
    for (size_t i = 0; i < planned.size(); ++i) total += planned[i].per_step * seconds[i];
    return total;
  };
  const auto base = timings.find("default");
  if (base == timings.end() || base->second.size() != planned.size())
    throw std::invalid_argument("NCCL tuning: no timing of NCCL's own choice for every planned collective");
  NcclRecommendation r;
  r.default_step_s = r.best_step_s = step_seconds(base->second);
  for (const NcclSetting& s : tried) {
    const auto t = timings.find(s.Name());
    if (t == timings.end() || t->second.size() != planned.size()) continue;  // that setting's run failed
    const double total = step_seconds(t->second);
    if (total < r.best_step_s) {
      r.best_step_s = total;
      r.setting = s;
    }
  }
  r.tuned = !r.setting.variables.empty() && r.best_step_s <= (1 - kWorthSetting) * r.default_step_s;
  if (!r.tuned) {
    r.setting = NcclSetting{};
    r.best_step_s = r.default_step_s;
  }
  for (size_t i = 0; i < planned.size(); ++i) {
    std::string fastest = "default";
    double best = base->second[i];
    for (const NcclSetting& s : tried) {
      const auto t = timings.find(s.Name());
      if (t != timings.end() && t->second.size() == planned.size() && t->second[i] < best) {
        best = t->second[i];
        fastest = s.Name();
      }
    }
    r.fastest.emplace_back(fastest, base->second[i] > 0 ? 1 - best / base->second[i] : 0);
  }
  return r;
}

std::vector<std::string> ApplyNcclSettings(const HardwareProfile& profile,
                                           const std::function<const char*(const char*)>& getenv,
                                           const std::function<void(const std::string&, const std::string&)>& setenv) {
  std::vector<std::string> lines;
  for (const auto& [variable, value] : profile.nccl_settings) {
    const char* set = getenv(variable.c_str());
    if (set == nullptr || *set == '\0') {
      setenv(variable, value);
      lines.push_back(variable + "=" + value + " (profile " + profile.name +
                      ": measured faster than NCCL's own choice by llmplan doctor --tune; set " + variable +
                      " yourself to choose)");
    } else if (value != set) {
      lines.push_back(variable + "=" + set + " (yours; profile " + profile.name + " recommends " + value + ")");
    }
  }
  return lines;
}

}  // namespace llmplan::executor
