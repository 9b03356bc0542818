// CostModel: how long one StepOp takes on a hardware profile, running alone.
// (Contention between streams is the simulator's business.) Calibration refits
// the profile numbers it reads, one operation class at a time.
#pragma once

#include "planner/hardware_profile.h"
#include "planner/step_program.h"

namespace llmplan {

class CostModel {
 public:
  // REQUIRES: profile outlives the CostModel.
  explicit CostModel(const HardwareProfile& profile) : profile_(profile) {}

  // Seconds for `op` with the device to itself.
  double Seconds(const StepOp& op) const;

  // Host seconds to issue `op`: its kernel launches (a collective or a copy
  // is one). Zero for host work, which HostBlocks() accounts for instead.
  double IssueSeconds(const StepOp& op) const;

  // GEMMs at the shape-dependent efficiency, attention at the measured rate,
  // memory-bound kernels at a fraction of HBM bandwidth, plus a fixed device
  // time per kernel; never below the host's cost of launching the kernels.
  double ComputeSeconds(const OpWork& work) const;

  const HardwareProfile& profile() const { return profile_; }

 private:
  const HardwareProfile& profile_;
};

}  // namespace llmplan
