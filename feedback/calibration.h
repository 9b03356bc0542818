// Calibration: a hardware profile refitted to measured runs. Every measured
// op has a predicted twin (the same program ran), so each profile term is
// fitted on the ops it prices, one operation class at a time:
//   compute      seconds = gemm_flops (a0 + a1/d) + attention_fwd a2 + attention_bwd a3
//                          + elementwise_bytes a4 + launches a5
//                plus the share of the op that a collective overlapped (slowdown),
//                by non-negative least squares on relative errors, per op and per run's total
//   collectives  per link and kind: seconds = scale * curve(bytes) + offset, fitted
//                to the share of each op that the profile's measured
//                collectives.slowdown_during_compute (kept, never fitted) leaves
//   copies       bytes / rate per direction; CPU AdamW params / rate
//   host issue   kernel_launch_s: the lower quartile of the gaps between issues, per launch
//   step         step_overhead_s: the measured step's wall time beyond its last op
//   memory       not fitted: margin_fraction = the largest under-prediction of peak memory
// A term the runs cannot identify (never exercised, or varying only in
// proportion to others) keeps its starting value, and the result says why.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "feedback/comparison.h"
#include "feedback/measured_run.h"
#include "planner/hardware_profile.h"
#include "planner/step_program.h"

namespace llmplan {

// A measured run with the program it executed, rebuilt on the starting profile.
struct CalibrationRun {
  MeasuredRun measured;
  StepProgram program;
};

// Rebuilds `run`'s program from its plan on `start` and checks it is the
// program that ran. Throws UserError when it is not (CheckSameProgram).
CalibrationRun PrepareCalibrationRun(MeasuredRun run, const HardwareProfile& start);

// `run` held against its program simulated on `profile`: llmplan compare's
// numbers (step time, time per class of ops, peak memory), for the errors
// before and after a calibration.
Comparison CompareOnProfile(const CalibrationRun& run, const HardwareProfile& profile);

// The hardware a plan was made for: its profile's name without directory,
// ".json" or "-calibrated" suffixes ("profiles/h200-sxm-calibrated.json" ->
// "h200-sxm"), since a calibrated profile describes the same devices.
std::string HardwareName(const Plan& plan);
// The same for a profile's name or path.
std::string ProfileHardwareName(const std::string& profile);

// Throws UserError, naming two runs and the difference, unless every run's plan
// was made for the same hardware and every run that says where it ran (its
// summary's device) ran on the kind of device `start` describes.
void CheckOneKindOfHardware(const std::vector<const MeasuredRun*>& runs, const HardwareProfile& start);

// One scalar profile term calibrate considers.
struct FittedTerm {
  std::string field;  // the profile's JSON path, "compute.gemm.max_efficiency"
  bool fitted = false;
  double before = 0, after = 0;  // after == before when kept
  std::string note;              // fitted: from what; kept: why it was left alone
};

// A collective curve, rewritten point by point as scale * seconds + offset_s.
struct CurveFit {
  std::string field;  // "collectives.intra_node.all_gather"
  bool fitted = false;
  double scale = 1, offset_s = 0;
  std::string note;
};

struct Calibration {
  // The starting profile with the fitted terms, named "<name>-calibrated",
  // its source saying when and from which runs.
  HardwareProfile profile;
  std::vector<FittedTerm> terms;  // every scalar term considered, fitted or kept
  std::vector<CurveFit> curves;   // every (link, collective) curve considered
  // The raw solution per class (seconds per GEMM FLOP, ...), with the ops it
  // came from and the fit's residual.
  nlohmann::json coefficients = nlohmann::json::object();
};

// Fits `start`'s terms to `runs`.
// REQUIRES: runs is not empty; each comes from PrepareCalibrationRun(., start).
// Throws UserError when no term can be fitted, naming one and why.
Calibration Calibrate(const HardwareProfile& start, const std::vector<CalibrationRun>& runs);

// {"terms": [...], "curves": [...], "coefficients": {...}}
nlohmann::json CalibrationToJson(const Calibration& c);

}  // namespace llmplan
