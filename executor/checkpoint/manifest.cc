#include "executor/checkpoint/manifest.h"

#include <cstdio>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "executor/checkpoint/crc32c.h"
#include "base/user_error.h"

namespace llmplan::checkpoint {

namespace {

using nlohmann::json;

constexpr int64_t kMaxElements = int64_t{1} << 50;  // far past any model, short of overflow in byte counts

class ManifestReader {
 public:
  explicit ManifestReader(std::string what) : what_(std::move(what)) {}

  [[noreturn]] void Fail(const std::string& why) const {
    throw UserError(what_ + ": invalid checkpoint manifest: " + why);
  }

  const json& Field(const json& object, const char* key, const std::string& where) const {
    if (!object.is_object()) Fail(where + " is not an object");
    auto it = object.find(key);
    if (it == object.end()) Fail(where + " has no \"" + key + "\"");
    return *it;
  }
  int64_t Count(const json& object, const char* key, const std::string& where, int64_t max = kMaxElements) const {
    const json& v = Field(object, key, where);
    if (!v.is_number_integer()) Fail(where + "." + key + " is not an integer");
    const int64_t n = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max) ? -1 : v.get<int64_t>();
    if (n < 0 || n > max) Fail(where + "." + key + " is out of range [0, " + std::to_string(max) + "]");
    return n;
  }
  std::string Text(const json& object, const char* key, const std::string& where) const {
    const json& v = Field(object, key, where);
    if (!v.is_string()) Fail(where + "." + key + " is not a string");
    return v.get<std::string>();
  }
  const json& Array(const json& object, const char* key, const std::string& where) const {
    const json& v = Field(object, key, where);
    if (!v.is_array()) Fail(where + "." + key + " is not an array");
    return v;
  }

 private:
  std::string what_;
};

bool SafeFileName(const std::string& name) {
  return !name.empty() && name.size() < 256 && name.find('/') == std::string::npos && name != "." && name != ".." &&
         name != "manifest.json" && name.find('\0') == std::string::npos;
}

}  // namespace

std::string ShardTensorName(int unit, const std::string& kind) { return "unit." + std::to_string(unit) + "." + kind; }

int64_t CheckpointParam::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// The checksum a manifest records of itself: CRC-32C of its compact JSON
// without the field (nlohmann's objects keep their keys sorted, so the text
// is the same on every machine).
std::string ManifestChecksum(json manifest) {
  manifest.erase("manifest_checksum");
  const std::string text = manifest.dump();
  return Crc32cText(Crc32c(text.data(), text.size()));
}

}  // namespace

json ManifestToJson(const CheckpointManifest& m) {
  json units = json::array();
  for (const CheckpointUnit& u : m.units) {
    json params = json::array(), pieces = json::array();
    for (const CheckpointParam& p : u.params) params.push_back({{"name", p.name}, {"shape", p.shape}});
    for (const CheckpointPiece& p : u.pieces) pieces.push_back({{"file", p.file}, {"begin", p.begin}, {"count", p.count}});
    units.push_back({{"name", u.name}, {"numel", u.numel}, {"params", params}, {"pieces", pieces}});
  }
  json files = json::array();
  for (const CheckpointFile& f : m.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"checksum", Crc32cText(f.crc32c)}});
  json data = nullptr;
  if (m.data.known())
    data = {{"name", m.data.name}, {"bytes", m.data.bytes}, {"ends_checksum", Crc32cText(m.data.ends_crc32c)}};
  json j{{"format", kManifestFormat},
              {"version", kManifestVersion},
              {"step", m.step},
              {"data_position", m.data_position},
              {"tokens_seen", m.tokens_seen},
              {"seed", m.seed},
              {"model", m.model_name},
              {"saved_by", {{"gpus", m.saved_gpus}, {"strategy", m.saved_strategy}, {"shard_group_size", m.saved_shard_group_size}}},
              {"created_utc", m.created_utc},
              {"data", data},
              {"state_kinds", {kStateKinds[0], kStateKinds[1], kStateKinds[2]}},
              {"units", units},
              {"files", files}};
  j["manifest_checksum"] = ManifestChecksum(j);
  return j;
}

CheckpointManifest ParseManifest(const std::string& text, const std::string& what) {
  ManifestReader r(what);
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) r.Fail("not valid JSON");
  if (!root.is_object()) r.Fail("not a JSON object");
  if (r.Text(root, "format", "manifest") != kManifestFormat) r.Fail("format is not \"" + std::string(kManifestFormat) + "\"");
  const int64_t version = r.Count(root, "version", "manifest");
  if (version != kManifestVersion && version != 1)
    r.Fail("version " + std::to_string(version) + " is not 1 or " + std::to_string(kManifestVersion) +
           " (written by another llmplan)");

  CheckpointManifest m;
  m.step = r.Count(root, "step", "manifest");
  m.data_position = r.Count(root, "data_position", "manifest");
  m.tokens_seen = r.Count(root, "tokens_seen", "manifest", std::numeric_limits<int64_t>::max());
  {
    const json& seed = r.Field(root, "seed", "manifest");
    if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0)) r.Fail("seed is not a non-negative integer");
    m.seed = seed.get<uint64_t>();
  }
  m.model_name = r.Text(root, "model", "manifest");
  const json& saved = r.Field(root, "saved_by", "manifest");
  m.saved_gpus = static_cast<int>(r.Count(saved, "gpus", "saved_by", 1 << 20));
  m.saved_strategy = r.Text(saved, "strategy", "saved_by");
  m.saved_shard_group_size = static_cast<int>(r.Count(saved, "shard_group_size", "saved_by", 1 << 20));
  m.created_utc = r.Text(root, "created_utc", "manifest");
  if (const auto it = root.find("data"); it != root.end() && !it->is_null()) {
    m.data.name = r.Text(*it, "name", "data");
    m.data.bytes = static_cast<uint64_t>(r.Count(*it, "bytes", "data", std::numeric_limits<int64_t>::max()));
    const std::string checksum = r.Text(*it, "ends_checksum", "data");
    unsigned value = 0;
    char tail = 0;
    if (checksum.size() != 15 || std::sscanf(checksum.c_str(), "crc32c:%8x%c", &value, &tail) != 1)
      r.Fail("data has checksum \"" + checksum + "\", not crc32c:<8 hex digits>");
    m.data.ends_crc32c = value;
  }

  std::set<std::string> file_names;
  for (const json& f : r.Array(root, "files", "manifest")) {
    CheckpointFile file;
    file.name = r.Text(f, "name", "files[]");
    if (!SafeFileName(file.name)) r.Fail("file name \"" + file.name + "\" is not a plain file name");
    if (!file_names.insert(file.name).second) r.Fail("file \"" + file.name + "\" is listed twice");
    file.bytes = static_cast<uint64_t>(r.Count(f, "bytes", "file " + file.name, std::numeric_limits<int64_t>::max()));
    const std::string checksum = r.Text(f, "checksum", "file " + file.name);
    unsigned value = 0;
    char tail = 0;
    if (checksum.size() != 15 || std::sscanf(checksum.c_str(), "crc32c:%8x%c", &value, &tail) != 1)
      r.Fail("file " + file.name + " has checksum \"" + checksum + "\", not crc32c:<8 hex digits>");
    file.crc32c = value;
    m.files.push_back(file);
  }

  std::set<std::string> unit_names;
  for (const json& u : r.Array(root, "units", "manifest")) {
    CheckpointUnit unit;
    unit.name = r.Text(u, "name", "units[]");
    const std::string where = "unit " + unit.name;
    if (!unit_names.insert(unit.name).second) r.Fail(where + " is listed twice");
    unit.numel = r.Count(u, "numel", where);
    int64_t sum = 0;
    for (const json& p : r.Array(u, "params", where)) {
      CheckpointParam param;
      param.name = r.Text(p, "name", where + " params[]");
      const json& shape = r.Array(p, "shape", where + " param " + param.name);
      if (shape.size() > 8) r.Fail(where + " param " + param.name + " has " + std::to_string(shape.size()) + " dimensions");
      int64_t numel = 1;
      for (const json& d : shape) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxElements)
          r.Fail(where + " param " + param.name + " has a bad dimension");
        param.shape.push_back(d.get<int64_t>());
        numel = d.get<int64_t>() == 0 ? 0 : numel;
        if (numel > 0 && d.get<int64_t>() > kMaxElements / numel) r.Fail(where + " param " + param.name + " is too large");
        numel *= d.get<int64_t>();
      }
      sum += numel;
      if (sum > kMaxElements) r.Fail(where + " is too large");
      unit.params.push_back(std::move(param));
    }
    if (sum != unit.numel) r.Fail(where + " has numel " + std::to_string(unit.numel) + " but its params hold " + std::to_string(sum));
    int64_t next = 0;
    for (const json& p : r.Array(u, "pieces", where)) {
      CheckpointPiece piece;
      piece.file = r.Text(p, "file", where + " pieces[]");
      if (file_names.count(piece.file) == 0) r.Fail(where + " names file \"" + piece.file + "\", which is not in files");
      piece.begin = r.Count(p, "begin", where + " piece");
      piece.count = r.Count(p, "count", where + " piece");
      if (piece.begin != next)
        r.Fail(where + " piece in " + piece.file + " starts at " + std::to_string(piece.begin) + ", expected " + std::to_string(next));
      next = piece.begin + piece.count;
      unit.pieces.push_back(std::move(piece));
    }
    if (next != unit.numel) r.Fail(where + " pieces cover " + std::to_string(next) + " of " + std::to_string(unit.numel) + " values");
    m.units.push_back(std::move(unit));
  }
  if (m.units.empty()) r.Fail("no units");
  // Last, so that a manifest that is wrong in form says how; one whose values
  // alone were changed (a step, a data position) is caught here.
  if (version >= 2) {
    const std::string recorded = r.Text(root, "manifest_checksum", "manifest");
    if (recorded != ManifestChecksum(root))
      r.Fail("its own checksum " + recorded + " does not match its contents (" + ManifestChecksum(root) +
             "): the manifest was changed or damaged");
  }
  return m;
}

}  // namespace llmplan::checkpoint
