// Preflight checks (see preflight.h).
#include "executor/run/preflight.h"

#include "executor/hardware/host_info.h"
#include "executor/step/out_of_memory.h"
#include "planner/estimate.h"
#include "planner/hardware_profile.h"
#include "planner/memory_timeline.h"
#include "planner/program_builder.h"
#include "base/user_error.h"

namespace llmplan::executor {

double PredictedRankPeakBytes(const StepProgram& program) { return ReplayMemory(program).peak; }

void CheckHostMemory(const Plan& plan, const StepProgram& program, int ranks_on_node, double available_bytes) {
  const double per_rank = PredictedRankPeakBytes(program);
  const double needed = per_rank * ranks_on_node;
  if (available_bytes <= 0 || needed <= available_bytes) return;  // 0: /proc/meminfo unreadable, no judgement
  std::string ranks;
  if (ranks_on_node > 1) ranks = " x " + std::to_string(ranks_on_node) + " ranks = " + FormatBytes(needed);
  throw UserError("the plan needs " + FormatBytes(per_rank) + " of host memory per rank (the planner's memory model)" +
                  ranks + ", but this host has " + FormatBytes(available_bytes) + " available (MemAvailable); " +
                  RePlanAdvice(plan));
}

void CheckPlanFitsHost(const Plan& plan, const at::Device& device, int ranks_on_node) {
  if (!device.is_cpu()) return;
  HardwareProfile profile;
  try {
    profile = LoadHardwareProfile(plan.profile);
  } catch (const UserError&) {
    profile.name = plan.profile;  // the run trains with defaults too (trainer.cc's ProfileOrDefault)
  }
  CheckHostMemory(plan, BuildStepProgram(plan, profile), ranks_on_node, ReadHostInfo().available_bytes);
}

}  // namespace llmplan::executor
