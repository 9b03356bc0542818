// NCCL settings chosen by measurement (llmplan doctor --tune): the plan's
// collectives, at their sizes, timed under each NCCL_ALGO x NCCL_PROTO and a
// few channel counts beside NCCL's own choice; the setting that makes the
// plan's collectives fastest in total is recommended when it beats NCCL's
// choice by kWorthSetting, and `llmplan run` then sets it unless the user
// set the variable. The field guides disagree on Ring against Tree: which
// wins depends on the sizes, the GPU count and the links, so it is measured,
// not assumed. This file holds the choice and its application; no CUDA.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "planner/hardware_profile.h"
#include "planner/step_program.h"

namespace llmplan::executor {

// One way to run NCCL: the variables it sets (none: NCCL's own choice).
struct NcclSetting {
  std::map<std::string, std::string> variables;
  std::string Name() const;  // "default", or "NCCL_ALGO=Tree NCCL_PROTO=LL128"
};

// NCCL's choice first, then Ring and Tree under each protocol, then NCCL's
// choice of algorithm with fewer and more channels.
std::vector<NcclSetting> NcclSettingsToTry();

// A collective of the plan and how often one step issues it.
struct PlannedCollective {
  CollectiveOp op = CollectiveOp::kAllGather;
  double bytes = 0;  // full (unsharded) buffer
  int per_step = 0;
};

// The distinct collectives (op, bytes) among groups of more than one GPU
// within a node, with their counts per step.
std::vector<PlannedCollective> PlannedCollectives(const StepProgram& program);

// The measurement: per setting (by Name()), seconds of each planned
// collective, in PlannedCollectives' order; a setting whose run failed has none.
using NcclTimings = std::map<std::string, std::vector<double>>;

constexpr double kWorthSetting = 0.03;  // the gain a recommendation must bring over NCCL's choice

struct NcclRecommendation {
  bool tuned = false;   // a setting beats NCCL's choice by kWorthSetting or more
  NcclSetting setting;  // the fastest in total (NCCL's choice when !tuned)
  double default_step_s = 0, best_step_s = 0;  // the plan's collectives per step
  // Per planned collective: the fastest setting's name and its gain over the default.
  std::vector<std::pair<std::string, double>> fastest;
};

// REQUIRES: timings holds "default" with one entry per planned collective.
NcclRecommendation RecommendNcclSetting(const std::vector<PlannedCollective>& planned,
                                        const std::vector<NcclSetting>& tried, const NcclTimings& timings);

// What `llmplan run` does with a profile's settings: each variable is set
// from the profile unless `getenv` has it; a line per variable says which it
// used. `setenv(name, value)` sets one.
std::vector<std::string> ApplyNcclSettings(const HardwareProfile& profile,
                                           const std::function<const char*(const char*)>& getenv,
                                           const std::function<void(const std::string&, const std::string&)>& setenv);

}  // namespace llmplan::executor
