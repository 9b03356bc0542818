// libFuzzer target: a safetensors file's length prefix and header (read from
// every checkpoint shard, pretrained weights, --init-from). The input is read
// two ways: as a whole file (ParseSafetensorsFile, as SafetensorsReader reads
// its mapping), and as a u64 data-section size followed by header JSON
// (ParseSafetensorsHeader with sizes no small input could have). Any bytes:
// entries that tile the data section exactly, each the size its dtype and
// shape say, with a shape LibTorch can allocate; or a UserError, nothing else.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "executor/checkpoint/safetensors_header.h"

namespace {

using llmplan::checkpoint::SafetensorsEntry;

// The parser's promises about what it returned (safetensors_header.h).
void CheckEntries(const std::vector<SafetensorsEntry>& entries, uint64_t data_bytes) {
  uint64_t next = 0;
  std::set<std::string> names;
  for (const SafetensorsEntry& e : entries) {
    if (e.name.empty() || e.name == "__metadata__" || !names.insert(e.name).second) __builtin_trap();
    if (e.begin != next || e.end < e.begin) __builtin_trap();  // sorted, no gap, no overlap
    const int width = llmplan::checkpoint::SafetensorsDtypeBytes(e.dtype);
    if (width == 0) __builtin_trap();
    // The reader hands e.shape to torch::empty: each dimension and the
    // element count must fit int64.
    int64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) __builtin_trap();
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(width), &bytes)) __builtin_trap();
    if (e.end - e.begin != bytes) __builtin_trap();
    next = e.end;
  }
  if (next != data_bytes) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    std::map<std::string, std::string> metadata;
    const llmplan::checkpoint::SafetensorsLayout layout =
        llmplan::checkpoint::ParseSafetensorsFile(data, size, "fuzz", &metadata);
    if (layout.data_offset < 8 || layout.data_offset > size) __builtin_trap();
    CheckEntries(layout.entries, size - layout.data_offset);
  } catch (const llmplan::UserError&) {
  }
  if (size >= 8) {
    uint64_t data_bytes = 0;
    std::memcpy(&data_bytes, data, 8);
    try {
      const std::string header(reinterpret_cast<const char*>(data) + 8, size - 8);
      CheckEntries(llmplan::checkpoint::ParseSafetensorsHeader(header, data_bytes, "fuzz"), data_bytes);
    } catch (const llmplan::UserError&) {
    }
  }
  return 0;
}
