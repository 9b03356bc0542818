// The calibration store: what every `llmplan run` on this machine measured,
// kept so that the next `llmplan estimate` predicts with the profile refitted
// on it (feedback/calibration.h) without the user asking. The loop closes by
// itself: a run records, an estimate reads.
//
//   STORE/HARDWARE/ENTRY/   one recorded run: plan.json, program.json,
//                           metrics.jsonl and op_times.jsonl (trimmed to the
//                           steps a fit reads), summary.json, entry.json
//                           (what the entry is valid for: MachineIdentity)
//   STORE/HARDWARE/fit.json the fit of the entries below, cached: refitted
//                           when the entries or this machine change
//
// STORE is $LLMPLAN_CALIBRATION_DIR, else $XDG_DATA_HOME/llmplan/calibration,
// else ~/.local/share/llmplan/calibration; LLMPLAN_CALIBRATION_DIR=off turns
// the store off (nothing recorded, nothing read). HARDWARE is the profile's
// hardware name (HardwareName: "h200-sxm-1gpu" for the shipped profile and
// its calibrated copies alike).
//
// An entry is used only on the machine it describes: same GPU model and
// count, host CPU, driver, CUDA, NCCL, LibTorch and llmplan version. Entries
// that no longer apply are ignored with a one-line note; nothing is deleted
// except by Forget.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "feedback/calibration.h"
#include "planner/hardware_profile.h"

namespace llmplan {

// The versions of the software a measurement depends on, as this build of
// llmplan knows them (tools/cli/build_info.h).
struct BuildVersions {
  std::string llmplan, torch, cuda, nccl;  // "" when not built with it
};

// What a measurement is valid for.
struct MachineIdentity {
  std::string gpu_model = "none";  // "NVIDIA H200" (/proc/driver/nvidia/gpus/*/information)
  int gpus = 0;                    // GPUs on this node
  std::string driver = "none";     // NVIDIA kernel module version (/proc/driver/nvidia/version)
  std::string host_cpu;            // "AMD EPYC 9654 96-Core Processor x 16" (model name x logical CPUs)
  BuildVersions build;
};

// This machine, read from /proc (no CUDA needed, so the planner binary can
// tell too), with `build`'s versions.
MachineIdentity ThisMachine(const BuildVersions& build);

nlohmann::json MachineIdentityToJson(const MachineIdentity& m);
MachineIdentity MachineIdentityFromJson(const nlohmann::json& j, const std::string& context);

// "" when `entry` and `here` are the same machine and software, else what
// differs, e.g. "llmplan 0.4.0 (recorded by 0.3.0)".
std::string IdentityDifference(const MachineIdentity& entry, const MachineIdentity& here);

// The store's directory, or nullopt when LLMPLAN_CALIBRATION_DIR=off (or no
// home to put it in).
std::optional<std::string> CalibrationStoreDir();

// One recorded run.
struct StoreEntry {
  std::string dir;        // STORE/HARDWARE/ENTRY
  std::string hardware;   // HARDWARE
  std::string run_dir;    // where the run wrote it
  std::string recorded_utc;
  std::string model;
  double step_s = 0;      // mean measured step over its timed steps
  MachineIdentity machine;
};

// Every entry of the store (of every hardware), oldest first. Entries whose
// entry.json cannot be read are left out (ListStore names them in `skipped`).
std::vector<StoreEntry> ListStore(const std::string& store, std::vector<std::string>* skipped = nullptr);

// The fit of one hardware's entries that apply here.
struct StoreFit {
  std::string hardware;
  std::optional<HardwareProfile> profile;  // the start refitted; nullopt when no entry applies
  std::vector<std::string> used;           // entry directories fitted
  std::vector<std::string> outliers;       // entries left out: they disagree with the others
  std::vector<std::string> notes;          // one line per reason entries were ignored
  // Median |step-time error| of each used entry predicted by the fit of the
  // others (leave one out); NaN with one entry.
  double held_out_error = NAN;
  // The largest |step-time error| of a used entry under the fit: how far a
  // run on this machine strays from it. NaN with one entry.
  double spread = NAN;
};

// Fits `start` to the entries of its hardware that apply to `here`. Runs
// that disagree with the rest are left out one at a time (with 3 or more: a
// run the fit misses by more than max(3 robust deviations, 8%) from the
// median miss, the one the others predict worst first) and named, not
// averaged in. The result is cached in STORE/HARDWARE/fit.json and reused
// while the entries, the start profile and `here` are unchanged. Only the
// newest `most_entries` entries are fitted (a note says how many were left
// out): the held-out error refits once per entry, so a fit's cost grows with
// the square of the entries, and a machine's newest runs say most about it.
constexpr size_t kFittedEntries = 24;
StoreFit FitStore(const std::string& store, const HardwareProfile& start, const MachineIdentity& here,
                  size_t most_entries = kFittedEntries);

// How far a run may stray from the fit's prediction before it is news: the
// fit's spread, at least 3%; 5% when there is no spread (no fit, or a fit of
// one run).
double DisagreementThreshold(const StoreFit& fit);

// How a newly finished run compares with what the store predicts for it.
struct RunAgainstStore {
  bool compared = false;   // the store had a fit for its hardware
  int runs = 0;            // entries in that fit
  double predicted_s = 0, measured_s = 0;
  double error = 0;        // (predicted - measured) / measured
  double threshold = 0;    // DisagreementThreshold of the fit
  bool disagrees = false;  // |error| > threshold
};

// Records the run in `run_dir` (a finished or stopped `llmplan run`) into the
// store under its plan's hardware, after holding it against the store's
// current fit (returned: a run that disagrees is recorded all the same, and
// the fit then leaves it out while it stays the odd one). Returns the entry
// directory in `entry_dir`.
// Throws UserError, saying why, for a run that cannot calibrate anything:
// fewer than 3 steps (no step past the warm-up), a program that does not
// match its plan, a plan whose profile is not here.
RunAgainstStore RecordRun(const std::string& store, const std::string& run_dir, const MachineIdentity& here,
                          std::string* entry_dir);

// Removes the entries (of `hardware`, or of all when empty); returns how many.
int ForgetStore(const std::string& store, const std::string& hardware);

}  // namespace llmplan
