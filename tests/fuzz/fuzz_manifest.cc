// libFuzzer target: a checkpoint's manifest.json (read before any shard is
// loaded). Any bytes: a manifest whose pieces cover every unit exactly, or a
// UserError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "executor/checkpoint/manifest.h"
#include "base/user_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const llmplan::checkpoint::CheckpointManifest m =
        llmplan::checkpoint::ParseManifest(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const auto& unit : m.units) {
      int64_t next = 0;
      for (const auto& piece : unit.pieces) {
        if (piece.begin != next) __builtin_trap();  // the parser promised contiguous pieces
        next += piece.count;
      }
      if (next != unit.numel) __builtin_trap();
    }
  } catch (const llmplan::UserError&) {
  }
  return 0;
}
