#include "executor/checkpoint/sharded_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/cuda.h>

#include "executor/checkpoint/crc32c.h"
#include "executor/hardware/host_memory.h"
#include "base/atomic_file.h"
#include "base/user_error.h"

namespace llmplan::executor {

namespace fs = std::filesystem;
using checkpoint::CheckpointManifest;

namespace {

std::string ShardFileName(int rank, int group) {
  char name[64];
  std::snprintf(name, sizeof(name), "shard-%05d-of-%05d.safetensors", rank, group);
  return name;
}

std::string DigestFileName(int rank, int group) { return ShardFileName(rank, group) + ".digest"; }

std::string NowUtc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// This rank's real elements of a unit: [begin, begin + count) of its vector.
struct OwnedRange {
  int64_t begin = 0, count = 0;
};
OwnedRange Owned(const FlatUnit& unit) { return {unit.owned_begin(), unit.owned_numel()}; }

}  // namespace

std::string UnitName(const LlamaModel& model, int unit) {
  if (unit == model.embedding_unit()) return "embed";
  if (unit == model.head_unit()) return "head";
  return "block." + std::to_string(unit - 1);
}

// ---------------------------------------------------------------------------
// Writing

// This rank's state copied out of training's buffers: the 3 kinds per unit,
// each the rank's real elements, on the host.
struct CheckpointWriter::Snapshot {
  std::vector<std::array<at::Tensor, 3>> units;
};

CheckpointWriter::CheckpointWriter(const Plan& plan, const LlamaModel& model, int rank, CheckpointOptions options)
    : plan_(plan),
      model_(model),
      rank_(rank),
      writer_(rank < plan.shard_group_size),
      committer_(rank == 0),
      options_(std::move(options)),
      store_(options_.dir) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

std::string CheckpointWriter::Wait() {
  if (thread_.joinable()) thread_.join();
  std::string error;
  error.swap(error_);
  return error;
}

std::string CheckpointWriter::Save(std::vector<FlatUnit>& units, const AdamWState& state,
                                   const TrainingProgress& progress) {
  std::string previous = Wait();
  last_step_ = progress.step;
  if (!writer_) return previous;  // a replica: shard group 0 holds the same values

  // Copy out, so training may change the buffers as soon as this returns.
  // Async saves reuse pinned buffers (one DMA per tensor); a sync save's
  // copies live only until it returns.
  at::NoGradGuard no_grad;
  auto fresh = std::make_unique<Snapshot>();
  Snapshot& snap = options_.async ? (snapshot_ ? *snapshot_ : *(snapshot_ = std::make_unique<Snapshot>())) : *fresh;
  snap.units.resize(units.size());
  bool on_gpu = false;
  for (size_t u = 0; u < units.size(); ++u) {
    const OwnedRange owned = Owned(units[u]);
    // An edge unit kept whole (replicate_edges) is the same on every rank:
    // rank 0 saves it, the others' files leave it out.
    const bool saved_by_rank0 = units[u].group_size() == 1 && plan_.shard_group_size > 1;
    // NVMe offload: m and v come out of the rank's state file, not memory.
    const int in_memory = state.nvme ? 1 : 3;
    for (int k = 0; k < 3; ++k) {
      at::Tensor& dst = snap.units[u][k];
      if (saved_by_rank0 && rank_ != 0) {
        dst = at::Tensor();
        continue;
      }
      if (!dst.defined() || dst.numel() != owned.count)
        dst = options_.async ? PinnedHostZeros(owned.count, at::kFloat) : at::empty({owned.count}, at::kFloat);
      if (k >= in_memory) continue;
      const at::Tensor& source = k == 0 ? units[u].master() : k == 1 ? state.exp_avg[u] : state.exp_avg_sq[u];
      on_gpu = on_gpu || source.is_cuda();
      dst.copy_(source.narrow(0, 0, owned.count), /*non_blocking=*/source.is_cuda());
    }
    if (state.nvme && snap.units[u][1].defined())
      state.nvme->Read(static_cast<int>(u), owned.count, snap.units[u][1].data_ptr<float>(),
                       snap.units[u][2].data_ptr<float>());
  }
#ifdef LLMPLAN_WITH_CUDA
  if (on_gpu) torch::cuda::synchronize(units.front().device().index());
#endif
  if (options_.async) {
    thread_ = std::thread([this, progress] { Write(*snapshot_, progress); });
  } else {
    Write(snap, progress);
    std::string error = Wait();
    if (!error.empty()) return previous.empty() ? error : previous + "; " + error;
  }
  return previous;
}

int64_t CheckpointWriter::staging_bytes() const {
  if (!snapshot_) return 0;
  int64_t bytes = 0;
  for (const auto& kinds : snapshot_->units)
    for (const at::Tensor& t : kinds)
      if (t.defined()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

CheckpointManifest CheckpointWriter::Manifest(const TrainingProgress& progress) const {
  CheckpointManifest m;
  m.step = progress.step;
  m.data_position = progress.data_position;
  m.tokens_seen = progress.tokens_seen;
  m.seed = plan_.seed;
  m.model_name = plan_.model.name;
  m.saved_gpus = plan_.gpus;
  m.saved_strategy = StrategyName(plan_.strategy);
  m.saved_shard_group_size = plan_.shard_group_size;
  m.created_utc = NowUtc();
  m.data = options_.data;
  const int group = plan_.shard_group_size;
  for (int u = 0; u < model_.num_units(); ++u) {
    checkpoint::CheckpointUnit unit;
    unit.name = UnitName(model_, u);
    for (const ParamShape& p : model_.unit_params(u)) unit.params.push_back({p.name, p.shape});
    unit.numel = model_.UnitNumel(u);
    // FlatUnit's layout: padded to a multiple of the group, equal slices (a
    // unit kept whole on every rank: one piece, in rank 0's file).
    const int unit_group = plan_.UnitShardGroup(u);
    const int64_t shard = (unit.numel + unit_group - 1) / unit_group;
    for (int r = 0; r < unit_group; ++r) {
      const int64_t begin = std::min<int64_t>(r * shard, unit.numel), end = std::min<int64_t>((r + 1) * shard, unit.numel);
      unit.pieces.push_back({ShardFileName(r, group), begin, end - begin});
    }
    m.units.push_back(std::move(unit));
  }
  return m;
}

void CheckpointWriter::Write(const Snapshot& snap, const TrainingProgress& progress) {
  const int group = plan_.shard_group_size;
  const std::string partial = store_.PathOf(progress.step) + ".partial";
  const std::string digest_path = partial + "/" + DigestFileName(rank_, group);
  // 1. This rank's shard, then its digest (written atomically: rank 0 reads
  //    it as soon as it exists).
  try {
    std::error_code ec;
    fs::create_directories(partial, ec);
    if (ec) throw UserError("cannot create " + partial + ": " + ec.message());
    std::map<std::string, at::Tensor> tensors;
    for (size_t u = 0; u < snap.units.size(); ++u)
      for (int k = 0; k < 3; ++k)
        if (snap.units[u][k].defined())
          tensors[checkpoint::ShardTensorName(static_cast<int>(u), checkpoint::kStateKinds[k])] = snap.units[u][k];
    const checkpoint::FileDigest d = checkpoint::WriteSafetensors(
        partial + "/" + ShardFileName(rank_, group), tensors,
        {{"format", checkpoint::kManifestFormat}, {"step", std::to_string(progress.step)}, {"rank", std::to_string(rank_)}});
    WriteFileAtomically(digest_path, nlohmann::json{{"bytes", d.bytes}, {"crc32c", d.crc32c}}.dump(), "checkpoint digest");
  } catch (const std::exception& e) {
    error_ = std::string("checkpoint at step ") + std::to_string(progress.step) + " not saved: " + e.what();
    // Tell rank 0, which otherwise waits for this rank's digest. On a full
    // disk the error's few bytes may not fit either: an empty digest (an
    // inode, no data block) still says "failed", so rank 0 does not wait
    // out wait_for_ranks while a synchronous save holds training up.
    try {
      WriteFileAtomically(digest_path, nlohmann::json{{"error", error_}}.dump(), "checkpoint digest");
    } catch (...) {
      const int fd = ::open(digest_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) ::close(fd);
    }
    if (!committer_) return;
  }
  if (!committer_) return;

  // 2. Rank 0: every writer's digest, the plan, the manifest, the commit.
  //    Rank 0 hears from every writer even when a save already failed (its
  //    own shard, or an earlier rank's): a writer still busy would otherwise
  //    recreate the partial directory after Abandon removed it, and leave
  //    its shard behind as a stray step-N.partial. A failed save waits for
  //    that cleanup at most kCleanupWait, and not at all where the partial
  //    directory could not be made (no writer can report into it); what is
  //    left then goes at the next commit or start (RemovePartials).
  constexpr std::chrono::seconds kCleanupWait{60};
  try {
    std::string failed = error_;
    CheckpointManifest manifest = Manifest(progress);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + options_.wait_for_ranks;
    const auto cleanup_deadline = start + std::min<std::chrono::seconds>(kCleanupWait, options_.wait_for_ranks);
    for (int r = 0; r < group; ++r) {
      if (r == rank_ && !error_.empty()) continue;  // its own failure is known
      const std::string path = partial + "/" + DigestFileName(r, group);
      bool reported = true;
      while (!fs::exists(path)) {
        const auto now = std::chrono::steady_clock::now();
        if (!failed.empty() && (now > cleanup_deadline || !fs::is_directory(partial))) {
          reported = false;
          break;
        }
        if (now > deadline)
          throw UserError("rank " + std::to_string(r) + " did not finish its shard within " +
                          std::to_string(options_.wait_for_ranks.count()) + " s");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!reported) break;
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
      std::string why;
      if (text.str().empty()) why = "rank " + std::to_string(r) + " could not write its shard, nor say why (a full disk?)";
      else if (j.is_discarded()) why = "rank " + std::to_string(r) + "'s digest is unreadable";
      else if (j.contains("error")) why = "rank " + std::to_string(r) + ": " + j["error"].get<std::string>();
      if (failed.empty() && !why.empty()) failed = why;
      if (failed.empty())
        manifest.files.push_back({ShardFileName(r, group), j.at("bytes").get<uint64_t>(), j.at("crc32c").get<uint32_t>()});
      std::remove(path.c_str());
    }
    if (!failed.empty()) throw UserError(failed);
    SavePlan(plan_, partial + "/plan.json");
    const checkpoint::FileDigest plan_digest = checkpoint::DigestFile(partial + "/plan.json");
    manifest.files.push_back({"plan.json", plan_digest.bytes, plan_digest.crc32c});
    store_.Commit(progress.step, manifest);
    if (progress.best) store_.SetBest(progress.best);
    store_.Prune(options_.keep);
  } catch (const std::exception& e) {
    store_.Abandon(progress.step);
    const std::string what = e.what();
    error_ = what.rfind("checkpoint", 0) == 0 ? what : "checkpoint at step " + std::to_string(progress.step) + " not saved: " + what;
  }
}

// ---------------------------------------------------------------------------
// Loading

CheckpointReader::CheckpointReader(const std::string& checkpoint_dir, const LlamaModel& model)
    : dir_(checkpoint_dir), manifest_(checkpoint::ReadManifest(checkpoint_dir)) {
  const auto& units = manifest_.units;
  const std::string other = ": the checkpoint holds another model (" + manifest_.model_name + "); resume with its plan";
  if (static_cast<int>(units.size()) != model.num_units())
    throw UserError(dir_ + " has " + std::to_string(units.size()) + " units, this model " + std::to_string(model.num_units()) + other);
  for (int u = 0; u < model.num_units(); ++u) {
    const auto& params = model.unit_params(u);
    const checkpoint::CheckpointUnit& saved = units[u];
    bool same = saved.params.size() == params.size();
    for (size_t i = 0; same && i < params.size(); ++i)
      same = saved.params[i].name == params[i].name && saved.params[i].shape == params[i].shape;
    if (!same) throw UserError(dir_ + ": unit " + saved.name + " differs from this model's " + UnitName(model, u) + other);
  }
}

const checkpoint::SafetensorsReader& CheckpointReader::File(const std::string& name) {
  auto it = files_.find(name);
  if (it == files_.end())
    it = files_.emplace(name, std::make_unique<checkpoint::SafetensorsReader>((fs::path(dir_) / name).string())).first;
  return *it->second;
}

void CheckpointReader::VerifyFilesFor(const Plan& plan, int64_t shard_rank) {
  std::set<std::string> needed;
  for (size_t u = 0; u < manifest_.units.size(); ++u) {
    const checkpoint::CheckpointUnit& unit = manifest_.units[u];
    // FlatUnit's layout: padded to a multiple of the group, equal slices.
    const int64_t group_size = plan.UnitShardGroup(static_cast<int>(u));
    const int64_t rank = group_size == 1 ? 0 : shard_rank;
    const int64_t shard = (unit.numel + group_size - 1) / group_size;
    const int64_t begin = std::min(rank * shard, unit.numel), end = std::min((rank + 1) * shard, unit.numel);
    for (const checkpoint::CheckpointPiece& p : unit.pieces)
      if (p.count > 0 && p.begin < end && begin < p.begin + p.count) needed.insert(p.file);
  }
  checkpoint::VerifyCheckpointFiles(dir_, manifest_, {needed.begin(), needed.end()});
}

at::Tensor CheckpointReader::Read(int unit, const std::string& kind, int64_t begin, int64_t count) {
  at::Tensor out = at::empty({count}, at::kFloat);
  const std::string tensor = checkpoint::ShardTensorName(unit, kind);
  for (const checkpoint::CheckpointPiece& p : manifest_.units.at(unit).pieces) {
    const int64_t lo = std::max(begin, p.begin), hi = std::min(begin + count, p.begin + p.count);
    if (lo >= hi) continue;
    const checkpoint::SafetensorsReader& file = File(p.file);
    // The piece's tensor must be exactly as long as the manifest says.
    auto entry = file.entries().find(tensor);
    if (entry == file.entries().end() || entry->second.shape != std::vector<int64_t>{p.count})
      throw UserError(file.path() + ": tensor " + tensor + " is missing or not of " + std::to_string(p.count) +
                      " values: the checkpoint is damaged");
    out.narrow(0, lo - begin, hi - lo).copy_(file.ReadRange(tensor, lo - p.begin, hi - lo));
  }
  return out;
}

void CheckpointReader::RestoreOptimizer(std::vector<FlatUnit>& units, AdamWState& state) {
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units.size(); ++u) {
    const OwnedRange owned = Owned(units[u]);
    const int unit = static_cast<int>(u);
    if (state.nvme) {  // into the rank's state file, one unit at a time
      const at::Tensor m = Read(unit, "exp_avg", owned.begin, owned.count);
      const at::Tensor v = Read(unit, "exp_avg_sq", owned.begin, owned.count);
      state.nvme->Write(unit, owned.count, m.data_ptr<float>(), v.data_ptr<float>());
      continue;
    }
    state.exp_avg[u].zero_();
    state.exp_avg_sq[u].zero_();
    state.exp_avg[u].narrow(0, 0, owned.count).copy_(Read(unit, "exp_avg", owned.begin, owned.count));
    state.exp_avg_sq[u].narrow(0, 0, owned.count).copy_(Read(unit, "exp_avg_sq", owned.begin, owned.count));
  }
  state.step = manifest_.step;
}

}  // namespace llmplan::executor
