#include "executor/checkpoint/checkpoint_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/checkpoint/crc32c.h"
#include "executor/checkpoint/remove_tree.h"
#include "base/atomic_file.h"
#include "base/user_error.h"

namespace llmplan::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPartialSuffix = ".partial";
constexpr uint64_t kMaxManifestBytes = 64ull << 20;

// "step-" followed by exactly 8 or more digits and nothing else.
std::optional<int64_t> StepOfName(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() < 13 || name.size() > 23) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// fsync of a file or directory by path: the data (or the directory's
// entries) reach the disk before we depend on them.
bool SyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

void RemoveAll(const std::string& path) { executor::RemoveTree(path); }

}  // namespace

std::string CheckpointName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

CheckpointStore::CheckpointStore(std::string dir) : dir_(std::move(dir)) {}

std::string CheckpointStore::PathOf(int64_t step) const { return (fs::path(dir_) / CheckpointName(step)).string(); }

namespace {

// Says once per process why a step-N directory is not a checkpoint to
// resume from or to keep: an unsaid skip once made a run restart from zero.
void WarnSkippedOnce(const std::string& path, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (warned.insert(path).second) std::cerr << "llmplan: warning: " << path << " skipped: " << why << std::endl;
}

}  // namespace

std::vector<int64_t> CheckpointStore::CompleteSteps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const auto step = StepOfName(it->path().filename().string());
    if (!step) continue;
    std::error_code file_ec;
    if (!fs::is_regular_file(it->path() / "manifest.json", file_ec)) {
      WarnSkippedOnce(it->path().string(), "it has no manifest.json (a save that never completed, or a copy)");
      continue;
    }
    // Ordered by the step the manifest holds, which must be the name's: a
    // copied or renamed directory is neither resumed from nor counted as
    // the newest when older checkpoints are pruned.
    try {
      ReadManifest(it->path().string());
      steps.push_back(*step);
    } catch (const UserError& e) {
      WarnSkippedOnce(it->path().string(), e.what());
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<std::string> CheckpointStore::Newest() const {
  const auto steps = CompleteSteps();
  if (steps.empty()) return std::nullopt;
  return PathOf(steps.back());
}

std::string CheckpointStore::Begin(int64_t step) const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw UserError("cannot create checkpoint directory " + dir_ + ": " + ec.message() + ": choose another --ckpt-dir");
  const std::string partial = PathOf(step) + kPartialSuffix;
  RemoveAll(partial);
  fs::create_directory(partial, ec);
  if (ec) throw UserError("cannot create " + partial + ": " + ec.message() + ": check permissions and free space");
  return partial;
}

std::string CheckpointStore::Commit(int64_t step, const CheckpointManifest& manifest) const {
  const std::string final_path = PathOf(step), partial = final_path + kPartialSuffix;
  auto fail = [&](const std::string& why) -> UserError {
    RemoveAll(partial);
    return UserError("checkpoint " + final_path + " not saved: " + why + " (the earlier checkpoints are intact)");
  };
  {
    const std::string text = ManifestToJson(manifest).dump(1) + "\n";
    const std::string path = partial + "/manifest.json";
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw fail("writing manifest.json failed (disk full?)");
  }
  // Every file, then the directory: the rename below must not publish
  // entries whose data is still only in the page cache.
  for (const CheckpointFile& f : manifest.files)
    if (!SyncPath(partial + "/" + f.name, false)) throw fail("cannot fsync " + f.name + " (" + std::strerror(errno) + ")");
  if (!SyncPath(partial + "/manifest.json", false) || !SyncPath(partial, true))
    throw fail(std::string("fsync failed (") + std::strerror(errno) + ")");
  // A complete checkpoint of the same step (saved before an interruption
  // that came before the next save) is moved aside, then removed: rename()
  // cannot replace a non-empty directory.
  std::error_code ec;
  const std::string aside = final_path + ".replaced";
  if (fs::exists(final_path, ec)) {
    RemoveAll(aside);
    if (::rename(final_path.c_str(), aside.c_str()) != 0) throw fail(std::string("cannot replace the older copy (") + std::strerror(errno) + ")");
  }
  if (::rename(partial.c_str(), final_path.c_str()) != 0) throw fail(std::string("rename failed (") + std::strerror(errno) + ")");
  SyncPath(dir_, true);
  RemoveAll(aside);
  return final_path;
}

void CheckpointStore::Abandon(int64_t step) const { RemoveAll(PathOf(step) + kPartialSuffix); }

void CheckpointStore::Prune(int keep, int64_t except_partial_step) const {
  const auto steps = CompleteSteps();
  const std::optional<BestCheckpoint> best = Best();
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i)
    if (!best || steps[i] != best->step) RemoveAll(PathOf(steps[i]));
  RemovePartialsExcept(except_partial_step);
}

std::optional<BestCheckpoint> CheckpointStore::Best() const {
  const fs::path path = fs::path(dir_) / "best.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    BestCheckpoint best{j.at("step").get<int64_t>(), j.at("eval_loss").get<double>()};
    if (best.step < 0) throw std::invalid_argument("negative step");
    return best;
  } catch (const std::exception& e) {
    std::cerr << "llmplan: warning: " << path.string() << " does not read (" << e.what()
              << "): no checkpoint is kept as the best; it is rewritten at the next evaluation" << std::endl;
    return std::nullopt;
  }
}

void CheckpointStore::SetBest(const std::optional<BestCheckpoint>& best) const {
  const fs::path path = fs::path(dir_) / "best.json";
  if (!best) {
    std::error_code ec;
    fs::remove(path, ec);
    return;
  }
  const nlohmann::json j = {{"step", best->step}, {"eval_loss", best->eval_loss}, {"checkpoint", CheckpointName(best->step)}};
  WriteFileAtomically(path.string(), j.dump(2) + "\n", "the best checkpoint's record");
}

void CheckpointStore::RemovePartials() const { RemovePartialsExcept(-1); }

void CheckpointStore::RemovePartialsExcept(int64_t except_partial_step) const {
  std::error_code ec;
  fs::directory_iterator it(dir_, ec), end;
  std::vector<fs::path> stale;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t n = std::strlen(kPartialSuffix);
    if (name.size() > n && name.compare(name.size() - n, n, kPartialSuffix) == 0) {
      const auto step = StepOfName(name.substr(0, name.size() - n));
      if (step && *step != except_partial_step) stale.push_back(it->path());
    }
  }
  for (const auto& p : stale) RemoveAll(p.string());
}

DataIdentity IdentifyDataFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw UserError(path + ": cannot open the token file");
  DataIdentity identity;
  identity.name = fs::path(path).filename().string();
  identity.bytes = static_cast<uint64_t>(in.tellg());
  constexpr uint64_t kEnd = 1 << 20;
  std::vector<char> block;
  auto extend = [&](uint64_t offset, uint64_t count) {
    block.resize(count);
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(block.data(), static_cast<std::streamsize>(count));
    if (!in) throw UserError(path + ": cannot read the token file");
    identity.ends_crc32c = Crc32cExtend(identity.ends_crc32c, block.data(), count);
  };
  extend(0, std::min(identity.bytes, kEnd));
  if (identity.bytes > kEnd) extend(identity.bytes - std::min(identity.bytes - kEnd, kEnd), std::min(identity.bytes - kEnd, kEnd));
  return identity;
}

CheckpointManifest ReadManifest(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "manifest.json").string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw UserError(checkpoint_dir + " is not a complete checkpoint (no manifest.json): pass a CKPT_DIR/step-NNNNNNNN directory");
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxManifestBytes)
    throw UserError(path + " is not a regular file under 64 MiB: the checkpoint is damaged");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw UserError("cannot read " + path);
  CheckpointManifest manifest = ParseManifest(text.str(), path);
  // The step a directory is named for is the step its manifest holds: a
  // renamed or copied step-N would otherwise be chosen as the newest.
  const std::string name = fs::path(checkpoint_dir).lexically_normal().filename().string();
  const std::string dir_name = name.empty() ? fs::path(checkpoint_dir).lexically_normal().parent_path().filename().string() : name;
  if (dir_name.rfind("step-", 0) == 0 && dir_name.size() == 13 &&
      dir_name.find_first_not_of("0123456789", 5) == std::string::npos && std::stoll(dir_name.substr(5)) != manifest.step)
    throw UserError(checkpoint_dir + " is named for step " + std::to_string(std::stoll(dir_name.substr(5))) +
                    " but its manifest holds step " + std::to_string(manifest.step) +
                    ": the checkpoint was renamed or copied; resume from another one (--resume-from)");
  return manifest;
}

void VerifyCheckpointFiles(const std::string& checkpoint_dir, const CheckpointManifest& manifest,
                           const std::vector<std::string>& files) {
  for (const CheckpointFile& f : manifest.files) {
    const std::string path = (fs::path(checkpoint_dir) / f.name).string();
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    const std::string advice = ": the checkpoint is damaged and was not loaded; resume from an older one (--resume-from)";
    // Every listed file must be there at its size, also those this rank does
    // not read (plan.json, other ranks' shards); only the ones it reads are
    // checksummed here.
    if (ec) throw UserError(path + " is missing (" + ec.message() + ")" + advice);
    if (size != f.bytes)
      throw UserError(path + " has " + std::to_string(size) + " bytes, the manifest says " + std::to_string(f.bytes) + advice);
    if (!files.empty() && std::find(files.begin(), files.end(), f.name) == files.end()) continue;
    const FileDigest digest = DigestFile(path);
    if (digest.crc32c != f.crc32c)
      throw UserError(path + " has checksum " + Crc32cText(digest.crc32c) + ", the manifest says " + Crc32cText(f.crc32c) + advice);
  }
}

}  // namespace llmplan::checkpoint
