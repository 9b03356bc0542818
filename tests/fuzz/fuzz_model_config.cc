// libFuzzer target: a Hugging Face config.json (llmplan estimate --model
// PATH). Any bytes: a valid ModelSpec or a UserError, nothing else.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "planner/model_spec.h"
#include "base/user_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const llmplan::ModelSpec spec = llmplan::ModelSpecFromHfConfig(j, "fuzz");
    spec.Validate();
    (void)spec.TotalParams();
  } catch (const llmplan::UserError&) {
  }
  return 0;
}
