#include "planner/json_read.h"

#include <fstream>
#include <sstream>

namespace llmplan {

nlohmann::json ParseJson(const std::string& text, const std::string& what) {
  try {
    // Depth is bounded by nlohmann's recursive parser only by the stack; a
    // hostile file of 100k nested brackets would overflow it, so refuse deep
    // nesting before parsing.
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
      if (in_string) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') in_string = false;
        continue;
      }
      if (c == '"') in_string = true;
      else if (c == '[' || c == '{') {
        if (++depth > 64) throw UserError(what + ": JSON nested deeper than 64 levels; is this the right file?");
      } else if (c == ']' || c == '}') {
        --depth;
      }
    }
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    throw UserError(what + ": not valid JSON (" + msg.substr(0, 160) + ")");
  }
}

nlohmann::json ReadJsonFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(what + ": cannot read '" + path + "'; check the path");
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) throw UserError(what + ": '" + path + "' is not a regular file");
  if (size > (64 << 20)) throw UserError(what + ": '" + path + "' is over 64 MiB; is this the right file?");
  in.seekg(0);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseJson(buffer.str(), what + " '" + path + "'");
}

JsonObject::JsonObject(const nlohmann::json& j, std::string context) : j_(j), context_(std::move(context)) {
  if (!j_.is_object()) throw UserError(context_ + ": expected a JSON object");
}

void JsonObject::Fail(const std::string& key, const std::string& problem) const {
  throw UserError(context_ + ": field '" + key + "' " + problem);
}

bool JsonObject::Has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }

const nlohmann::json& JsonObject::Raw(const std::string& key) const {
  if (!Has(key)) Fail(key, "is missing");
  return j_.at(key);
}

JsonObject JsonObject::Object(const std::string& key) const { return JsonObject(Raw(key), context_ + ": " + key); }

double JsonObject::Number(const std::string& key) const {
  const auto& v = Raw(key);
  if (!v.is_number()) Fail(key, "must be a number");
  double d = v.get<double>();
  if (!std::isfinite(d)) Fail(key, "must be finite");
  return d;
}

double JsonObject::Number(const std::string& key, double fallback) const {
  return Has(key) ? Number(key) : fallback;
}

double JsonObject::NumberIn(const std::string& key, double lo, double hi) const {
  double d = Number(key);
  if (d < lo || d > hi) {
    std::ostringstream os;
    os << "is " << d << "; it must be between " << lo << " and " << hi;
    Fail(key, os.str());
  }
  return d;
}

double JsonObject::NumberIn(const std::string& key, double lo, double hi, double fallback) const {
  return Has(key) ? NumberIn(key, lo, hi) : fallback;
}

int64_t JsonObject::Integer(const std::string& key, int64_t lo, int64_t hi) const {
  const auto& v = Raw(key);
  if (!v.is_number()) Fail(key, "must be a whole number");
  double d = v.get<double>();
  if (!std::isfinite(d) || d != std::floor(d)) Fail(key, "must be a whole number");
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    std::ostringstream os;
    os << "is " << d << "; it must be between " << lo << " and " << hi;
    Fail(key, os.str());
  }
  return static_cast<int64_t>(d);
}

int64_t JsonObject::Integer(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) const {
  return Has(key) ? Integer(key, lo, hi) : fallback;
}

std::string JsonObject::String(const std::string& key) const {
  const auto& v = Raw(key);
  if (!v.is_string()) Fail(key, "must be a string");
  return v.get<std::string>();
}

std::string JsonObject::String(const std::string& key, const std::string& fallback) const {
  return Has(key) ? String(key) : fallback;
}

bool JsonObject::Bool(const std::string& key, bool fallback) const {
  if (!Has(key)) return fallback;
  const auto& v = Raw(key);
  if (!v.is_boolean()) Fail(key, "must be true or false");
  return v.get<bool>();
}

}  // namespace llmplan
