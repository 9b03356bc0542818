// RunNcclTuning: `llmplan doctor --tune` — times a plan's collectives under
// each of NcclSettingsToTry() (nccl_tuning.h) on this machine's GPUs and
// recommends one. NCCL reads its variables once per process, so each setting
// runs in a child process of this binary (`doctor --tune-child`) started
// with that setting's variables; the child measures with MeasureCollectives
// (executor/profile/nccl_collectives.h), as `llmplan profile` does.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "executor/doctor/nccl_tuning.h"

namespace llmplan::executor {

struct NcclTuneResult {
  std::string nothing_to_tune;  // why nothing was measured (one GPU, no collective); empty when measured
  int gpus = 0;                 // the GPUs the collectives ran among
  std::vector<PlannedCollective> planned;
  std::vector<NcclSetting> tried;
  NcclTimings timings;
  std::map<std::string, std::string> failed;  // setting -> why its child failed
  NcclRecommendation recommendation;
};

// `executable`: this binary (llmplan-executor), which the children run.
// Never throws for a setting that fails (its child's last line is kept);
// throws UserError when NCCL's own choice cannot be measured.
NcclTuneResult RunNcclTuning(const StepProgram& program, const std::string& executable);

// The child: the collectives of `sizes` bytes among GPUs 0..gpus-1, as one
// JSON line on `out`. Throws UserError in a build without CUDA.
void RunNcclTuneChild(int gpus, const std::vector<double>& sizes, std::ostream& out);

// The report: a line per planned collective, then the recommendation.
std::string NcclTuneText(const NcclTuneResult& r);

}  // namespace llmplan::executor
