// libFuzzer target: a plan file (llmplan estimate -o, read by simulate, run,
// compare). Any bytes must give a Plan that validates or a UserError, never a
// crash, a hang or an exception of another kind.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "base/user_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    llmplan::PlanFromJson(j, "fuzz").Validate();
  } catch (const llmplan::UserError&) {
  }
  return 0;
}
