#include "base/json_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

namespace {

std::string FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string MiB(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

std::string ReadInputFile(const std::string& path, const std::string& what, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // forever; it does not change reads from a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw UserError(what + ": cannot read '" + path + "' (" + std::strerror(errno) + "); check the path");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) throw UserError(what + ": cannot stat '" + path + "' (" + std::strerror(errno) + ")");
  // /dev/zero, a FIFO or a terminal never ends (or ends when someone else
  // decides): only a file on disk has a size to check.
  if (!S_ISREG(st.st_mode))
    throw UserError(what + ": '" + path + "' is " + FileKind(st.st_mode) + ", not a regular file; pass the path of a " + what + " file");
  const std::string too_big = what + ": '" + path + "' is over " + MiB(max_bytes) + "; is this the right file?";
  if (st.st_size > max_bytes) throw UserError(too_big);
  // Read at most max_bytes + 1 whatever the size said: a file that grows while
  // it is read, or a /proc file that reports size 0, stays bounded.
  std::string text;
  text.resize(static_cast<size_t>(std::min<int64_t>(max_bytes, std::max<int64_t>(st.st_size, 4096)) + 1));
  size_t filled = 0;
  for (;;) {
    if (filled == text.size()) {
      if (static_cast<int64_t>(filled) > max_bytes) throw UserError(too_big);
      text.resize(static_cast<size_t>(std::min<int64_t>(max_bytes + 1, static_cast<int64_t>(text.size()) * 2)));
    }
    const ssize_t n = ::read(fd, text.data() + filled, text.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError(what + ": cannot read '" + path + "' (" + std::strerror(errno) + ")");
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  if (static_cast<int64_t>(filled) > max_bytes) throw UserError(too_big);
  text.resize(filled);
  return text;
}

nlohmann::json ReadJsonFile(const std::string& path, const std::string& what) {
  return ParseJson(ReadInputFile(path, what, kMaxJsonFileBytes), what + " '" + path + "'");
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
