// safetensors header parsing and validation, free of LibTorch (see
// safetensors_header.h).
#include "executor/checkpoint/safetensors_header.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "base/user_error.h"

namespace llmplan::checkpoint {

using nlohmann::json;

int SafetensorsDtypeBytes(const std::string& dtype) {
  static constexpr struct {
    const char* name;
    int bytes;
  } kDtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
                 {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2}, {"U32", 4}};
  for (const auto& d : kDtypes) {
    if (dtype == d.name) return d.bytes;
  }
  return 0;
}

std::vector<SafetensorsEntry> ParseSafetensorsHeader(const std::string& header, uint64_t data_bytes,
                                                     const std::string& what,
                                                     std::map<std::string, std::string>* metadata) {
  auto bad = [&](const std::string& why) {
    return UserError(what + ": invalid safetensors header: " + why);
  };
  // nlohmann keeps the last of duplicate keys silently; the callback sees
  // every key, so track the keys of each open object.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json root;
  try {
    root = json::parse(header, on_event);
  } catch (const json::exception& e) {
    throw bad(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) throw bad("duplicate key '" + duplicate + "'");
  if (!root.is_object()) throw bad("the top level is not a JSON object");

  std::vector<SafetensorsEntry> entries;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) throw bad("__metadata__ is not an object");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) throw bad("__metadata__ value '" + m.key() + "' is not a string");
        if (metadata != nullptr) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (name.empty()) throw bad("empty tensor name");
    if (!value.is_object()) throw bad("entry '" + name + "' is not an object");
    for (auto f = value.begin(); f != value.end(); ++f) {
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets") {
        throw bad("entry '" + name + "' has unknown field '" + f.key() + "'");
      }
    }
    SafetensorsEntry entry;
    entry.name = name;
    if (!value.contains("dtype") || !value["dtype"].is_string()) throw bad("entry '" + name + "' has no dtype string");
    entry.dtype = value["dtype"].get<std::string>();
    const int dtype_bytes = SafetensorsDtypeBytes(entry.dtype);
    if (dtype_bytes == 0) throw bad("entry '" + name + "' has unsupported dtype '" + entry.dtype + "'");
    if (!value.contains("shape") || !value["shape"].is_array()) throw bad("entry '" + name + "' has no shape array");
    uint64_t bytes = static_cast<uint64_t>(dtype_bytes);
    for (const json& dim : value["shape"]) {
      if (!dim.is_number_unsigned()) throw bad("entry '" + name + "' has a shape that is not non-negative integers");
      const uint64_t d = dim.get<uint64_t>();
      // Each dimension and the element count (no larger than the byte count,
      // unless a dimension is 0) must fit torch's int64 sizes, and the byte
      // count must not wrap.
      if (d > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, d, &bytes) ||
          bytes > static_cast<uint64_t>(INT64_MAX)) {
        throw bad("entry '" + name + "' shape is too large");
      }
      entry.shape.push_back(static_cast<int64_t>(d));
    }
    const json* offsets = value.contains("data_offsets") ? &value["data_offsets"] : nullptr;
    if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      throw bad("entry '" + name + "' needs data_offsets [begin, end] of non-negative integers");
    }
    entry.begin = (*offsets)[0].get<uint64_t>();
    entry.end = (*offsets)[1].get<uint64_t>();
    if (entry.end < entry.begin) throw bad("entry '" + name + "' ends before it begins");
    if (entry.end > data_bytes) {
      throw bad("entry '" + name + "' ends at byte " + std::to_string(entry.end) + " of a " +
                std::to_string(data_bytes) + "-byte data section (file truncated?)");
    }
    if (entry.end - entry.begin != bytes) {
      throw bad("entry '" + name + "' spans " + std::to_string(entry.end - entry.begin) + " bytes but its " +
                entry.dtype + " shape needs " + std::to_string(bytes));
    }
    entries.push_back(std::move(entry));
  }

  // Tensors must tile the data section exactly: overlaps would alias two
  // tensors, gaps or a tail would be bytes nobody accounts for.
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin < expected) throw bad("entry '" + e.name + "' overlaps the tensor before it");
    if (e.begin > expected) throw bad("gap of " + std::to_string(e.begin - expected) + " bytes before entry '" + e.name + "'");
    expected = e.end;
  }
  if (expected != data_bytes) {
    throw bad(std::to_string(data_bytes - expected) + " bytes after the last tensor are not described by the header");
  }
  return entries;
}

SafetensorsLayout ParseSafetensorsFile(const unsigned char* file, uint64_t file_bytes, const std::string& what,
                                       std::map<std::string, std::string>* metadata) {
  if (file_bytes < 8) {
    throw UserError(what + ": " + std::to_string(file_bytes) + " bytes is too short for a safetensors file (truncated?)");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, file, 8);  // little-endian on the hosts we build for (safetensors.cc asserts it)
  if (header_len > kSafetensorsMaxHeaderBytes) {
    throw UserError(what + ": safetensors header length " + std::to_string(header_len) +
                    " exceeds the 100 MB limit: not a safetensors file or corrupt");
  }
  if (header_len > file_bytes - 8) {
    throw UserError(what + ": safetensors header length " + std::to_string(header_len) + " runs past the end of the " +
                    std::to_string(file_bytes) + "-byte file (truncated?)");
  }
  SafetensorsLayout layout;
  layout.data_offset = 8 + header_len;
  const std::string header(reinterpret_cast<const char*>(file + 8), header_len);
  layout.entries = ParseSafetensorsHeader(header, file_bytes - layout.data_offset, what, metadata);
  return layout;
}

}  // namespace llmplan::checkpoint
