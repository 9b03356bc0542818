// CostModel: how long one StepOp takes on a hardware profile, running alone.
// (Contention between streams is the simulator's business.) Calibration refits
// the profile numbers it reads, one operation class at a time.
#pragma once

#include <algorithm>

#include "planner/hardware_profile.h"
#include "planner/step_program.h"

namespace llmplan {

// The terms of ComputeSeconds, so a report can say where a compute op's
// predicted time goes (llmplan compare).
struct ComputeTerms {
  double gemm = 0;             // GEMMs at the shape-dependent efficiency
  double attention = 0;        // attention at the profile's forward or backward rate
  double memory_bound = 0;     // memory-bound kernels at a fraction of HBM bandwidth
  double kernel_overhead = 0;  // the fixed device time each kernel adds
  double launch_floor = 0;     // host time to launch the kernels; they cannot finish sooner

  double DeviceSeconds() const { return gemm + attention + memory_bound + kernel_overhead; }
  double Seconds() const { return std::max(DeviceSeconds(), launch_floor); }
};

class CostModel {
 public:
  // REQUIRES: profile outlives the CostModel.
  explicit CostModel(const HardwareProfile& profile) : profile_(profile) {}

  // Seconds for `op` with the device to itself (a captured op, replayed from
  // the step's CUDA graph, without the floor of the host's launches).
  double Seconds(const StepOp& op) const;

  // Host seconds to issue `op`: its kernel launches (a collective or a copy
  // is one). Zero for host work, which HostBlocks() accounts for instead.
  // The captured ops are one graph launch, charged to the first.
  double IssueSeconds(const StepOp& op) const;

  // GEMMs at the shape-dependent efficiency, attention at the measured rate,
  // memory-bound kernels at a fraction of HBM bandwidth, plus a fixed device
  // time per kernel; never below the host's cost of launching the kernels.
  double ComputeSeconds(const OpWork& work) const { return ComputeTermSeconds(work).Seconds(); }
  ComputeTerms ComputeTermSeconds(const OpWork& work) const;

  // Whether Seconds(op) is ComputeSeconds(op.work): kernels on the device,
  // not a collective, a copy or host work.
  static bool PricedAsCompute(const StepOp& op);

  const HardwareProfile& profile() const { return profile_; }

 private:
  const HardwareProfile& profile_;
};

}  // namespace llmplan
