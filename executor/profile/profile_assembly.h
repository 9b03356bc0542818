// AssembleProfile: a HardwareProfile from what `llmplan profile` measured,
// with everything it cannot measure kept from a base profile (the datasheet
// peak, inter-node curves, price, the memory margin...), a
// `source` that says when, where and how each number was measured and which
// came from the base, and the raw tables as the file's `measurements` object
// (which LoadHardwareProfile ignores). Pure: no LibTorch, no CUDA.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/profile/profile_measurements.h"
#include "planner/hardware_profile.h"

namespace llmplan::executor {

struct AssembledProfile {
  HardwareProfile profile;
  nlohmann::json measurements;
  std::vector<std::string> from_base;  // profile fields kept from the base, by their JSON names
};

// REQUIRES: m.gemms holds at least one in_fit row, m.attention at least one
// row, the bandwidth and launch figures are positive, m.machine.device_kind is
// "cuda" or "cpu". Throws UserError naming the field when the assembled
// profile does not validate (a measurement that came out absurd).
AssembledProfile AssembleProfile(const ProfileMeasurements& m, const HardwareProfile& base, const std::string& name);

// The profile file: HardwareProfileToJson plus "measurements".
nlohmann::json ProfileFileJson(const AssembledProfile& assembled);

// "795 TFLOP/s", "4.24 TB/s", "55.5 GB/s": three significant digits in the
// largest SI prefix that keeps the number at least 1.
std::string FormatRate(double value, const char* unit);

// The built-in profile a machine's measurements start from: "cpu" on the
// CPU; on CUDA the profile whose name's first word ("h200", "a100", "l40s")
// is in the GPU's name, else h200-sxm. `builtin_names` as
// BuiltinProfileNames() lists them.
std::string DefaultBaseProfile(const std::string& device_kind, const std::string& device_name,
                               const std::vector<std::string>& builtin_names);

}  // namespace llmplan::executor
