// libFuzzer target: a hardware profile (profiles/*.json, llmplan profile -o,
// llmplan calibrate -o). Any bytes: a profile or a UserError, nothing else.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "planner/hardware_profile.h"
#include "base/user_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    llmplan::HardwareProfileFromJson(j, "fuzz");
  } catch (const llmplan::UserError&) {
  }
  return 0;
}
