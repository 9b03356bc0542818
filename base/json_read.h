// Checked reads from untrusted JSON (profiles, plans, HF configs): every
// accessor throws UserError naming the file's context and the field, instead
// of nlohmann's type_error, so hostile input never crashes the tool.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "base/user_error.h"

namespace llmplan {

// Parses `text` as JSON. Throws UserError("<what>: not valid JSON (...)").
nlohmann::json ParseJson(const std::string& text, const std::string& what);

// The largest JSON file read (config.json, plan, profile, step program): the
// biggest real one is a few MiB; the limit keeps a wrong path from filling memory.
inline constexpr int64_t kMaxJsonFileBytes = int64_t{64} << 20;

// The whole of a regular file of at most `max_bytes`. Never blocks on a FIFO
// and never reads past max_bytes + 1, so /dev/zero, a FIFO, a directory or a
// huge file fail at once.
// REQUIRES: max_bytes >= 0. Throws UserError("<what>: '<path>' is a FIFO, not
// a regular file; ...") and the like when the path is missing, unreadable, not
// a regular file or over max_bytes.
std::string ReadInputFile(const std::string& path, const std::string& what, int64_t max_bytes);

// Reads (ReadInputFile, at most kMaxJsonFileBytes) and parses a file.
// Throws UserError if it cannot be read or parsed.
nlohmann::json ReadJsonFile(const std::string& path, const std::string& what);

// A JSON object together with a name for error messages ("profile h200-sxm.json: memory").
class JsonObject {
 public:
  JsonObject(const nlohmann::json& j, std::string context);

  bool Has(const std::string& key) const;
  const nlohmann::json& Raw(const std::string& key) const;  // REQUIRES: Has(key)
  JsonObject Object(const std::string& key) const;
  double Number(const std::string& key) const;
  double Number(const std::string& key, double fallback) const;
  // A finite number in [lo, hi].
  double NumberIn(const std::string& key, double lo, double hi) const;
  double NumberIn(const std::string& key, double lo, double hi, double fallback) const;
  // A whole number in [lo, hi].
  int64_t Integer(const std::string& key, int64_t lo, int64_t hi) const;
  int64_t Integer(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) const;
  std::string String(const std::string& key) const;
  std::string String(const std::string& key, const std::string& fallback) const;
  bool Bool(const std::string& key, bool fallback) const;
  const std::string& context() const { return context_; }
  const nlohmann::json& json() const { return j_; }
  [[noreturn]] void Fail(const std::string& key, const std::string& problem) const;

 private:
  const nlohmann::json& j_;
  std::string context_;
};

}  // namespace llmplan
