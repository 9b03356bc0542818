// The per-class fits behind Calibrate (feedback/calibration.h), internal to
// feedback/. Each reads its starting values from `profile`, writes the fitted
// ones back, and records in `out` every term it considered: fitted (from what)
// or kept (why).
#pragma once

#include <string>
#include <vector>

#include "feedback/calibration.h"

namespace llmplan::calibration {

// A column must stand this far outside the span of the others to be fitted
// (IdentifyColumns): 1% noise then moves its coefficient by about 1/fraction %.
constexpr double kMinIndependentFraction = 0.02;

// Per op id, the mean over the run's timed steps of the seconds of the op's
// measured span during which an op on one of the `beside` streams ran.
std::vector<double> MeanSecondsBeside(const CalibrationRun& run, const std::vector<StreamKind>& beside);

// "12 ops in 2 runs"
std::string OpsInRuns(int ops, int runs);

// compute.kernel_launch_s from the host's issue gaps.
void FitHostIssue(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out);

// The compute terms and compute.slowdown_during_collectives, jointly.
// REQUIRES: FitHostIssue ran (ops at its launch floor measure the host, not the device).
void FitCompute(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out);

// Every (link, collective) curve the runs measured, each for the part of its
// ops' time that the profile's collectives.slowdown_during_compute leaves
// (kept as measured: the runs cannot tell it from the curves' scales).
void FitCollectives(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out);

// host.host_to_device_bytes_per_s, device_to_host_bytes_per_s, and the CPU
// AdamW rates alone and shared (cpu_adam_alone_params_per_s, cpu_adam_params_per_s).
void FitCopiesAndCpuOptimizer(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out);

// host.step_overhead_s: the measured steps' wall time beyond their last op.
void FitStepOverhead(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out);

// memory.margin_fraction: the largest under-prediction of peak memory.
void SetMemoryMargin(const std::vector<CalibrationRun>& runs, HardwareProfile& profile, Calibration& out);

}  // namespace llmplan::calibration
