#include "executor/optimizer/nvme_optimizer_state.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <array>
#include <cstring>
#include <filesystem>
#include <future>

#include "executor/optimizer/cpu_adamw.h"
#include "planner/nvme_offload.h"

namespace llmplan::executor {

namespace {
int64_t AlignedElements(int64_t n) {
  constexpr int64_t per = kNvmeAlignment / 4;
  return (n + per - 1) / per * per;
}
}  // namespace

std::string NvmeStatePath(const std::string& dir, int rank) {
  char name[96];
  std::snprintf(name, sizeof name, "llmplan-adamw-rank%05d-pid%d.bin", rank, static_cast<int>(::getpid()));
  return (std::filesystem::path(dir) / name).string();
}

NvmeOptimizerState::NvmeOptimizerState(const std::string& path, std::vector<int64_t> shard_numels, bool try_direct)
    : shard_numels_(std::move(shard_numels)), file_(path, /*truncate=*/true, try_direct) {
  for (int64_t n : shard_numels_) {
    unit_offsets_.push_back(file_bytes_);
    file_bytes_ += NvmeUnitBytes(n);
  }
  try {
    file_.Allocate(file_bytes_);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw;
  }
  // Scratch: gone from the directory now, its blocks freed when the last
  // descriptor closes (at exit, a crash included).
  std::error_code ec;
  std::filesystem::remove(path, ec);
  for (int b = 0; b < kNvmeBuffers; ++b) buffers_.emplace_back(NvmeBlockBytes(NvmeStagingBlockElements(shard_numels_)));
}

int64_t NvmeOptimizerState::Blocks(int unit) const {
  return (shard_numels_.at(unit) + kNvmeBlockElements - 1) / kNvmeBlockElements;
}

NvmeOptimizerState::Block NvmeOptimizerState::BlockOf(int unit, int64_t k) const {
  Block b;
  b.first = k * kNvmeBlockElements;
  b.elements = std::min(kNvmeBlockElements, shard_numels_[unit] - b.first);
  b.offset = unit_offsets_[unit] + k * NvmeBlockBytes(kNvmeBlockElements);
  b.bytes = NvmeBlockBytes(b.elements);
  b.v_index = AlignedElements(b.elements);
  return b;
}

void NvmeOptimizerState::Update(int unit, float* param, const float* grad, void* compute_out, bool compute_is_bf16,
                                const AdamWScalars& s, int threads) {
  const int64_t blocks = Blocks(unit);
  const int64_t out_size = compute_is_bf16 ? 2 : 4;
  // One read and one write in flight per buffer. Declared after the buffers
  // they point into (members), and std::async's futures wait in their
  // destructors, so an exception never leaves a transfer running.
  std::array<std::future<void>, kNvmeBuffers> reads, writes;
  auto read = [this, unit](int64_t k) {
    const Block b = BlockOf(unit, k);
    void* into = buffers_[k % kNvmeBuffers].data();
    return std::async(std::launch::async, [this, b, into] { file_.ReadAt(b.offset, into, b.bytes); });
  };
  if (blocks > 0) reads[0] = read(0);
  for (int64_t k = 0; k < blocks; ++k) {
    const int slot = static_cast<int>(k % kNvmeBuffers);
    reads[slot].get();
    if (k + 1 < blocks) {
      // Block k+1's buffer last held block k-2: its write must be done.
      const int next = static_cast<int>((k + 1) % kNvmeBuffers);
      if (writes[next].valid()) writes[next].get();
      reads[next] = read(k + 1);
    }
    const Block b = BlockOf(unit, k);
    float* m = buffers_[slot].floats();
    CpuAdamW(param + b.first, grad + b.first, m, m + b.v_index, b.elements, s, threads,
             compute_out == nullptr ? nullptr : static_cast<char*>(compute_out) + b.first * out_size, compute_is_bf16);
    const void* from = m;
    writes[slot] = std::async(std::launch::async, [this, b, from] { file_.WriteAt(b.offset, from, b.bytes); });
  }
  for (auto& w : writes)
    if (w.valid()) w.get();
}

void NvmeOptimizerState::Read(int unit, int64_t count, float* m, float* v) {
  for (int64_t k = 0; k < Blocks(unit); ++k) {
    const Block b = BlockOf(unit, k);
    if (b.first >= count) break;
    const float* block = buffers_[0].floats();
    file_.ReadAt(b.offset, buffers_[0].data(), b.bytes);
    const int64_t n = std::min(b.elements, count - b.first);
    std::memcpy(m + b.first, block, n * 4);
    std::memcpy(v + b.first, block + b.v_index, n * 4);
  }
}

void NvmeOptimizerState::Write(int unit, int64_t count, const float* m, const float* v) {
  for (int64_t k = 0; k < Blocks(unit); ++k) {
    const Block b = BlockOf(unit, k);
    float* block = buffers_[0].floats();
    std::memset(block, 0, b.bytes);
    const int64_t n = std::clamp<int64_t>(count - b.first, 0, b.elements);
    if (n > 0) {
      std::memcpy(block, m + b.first, n * 4);
      std::memcpy(block + b.v_index, v + b.first, n * 4);
    }
    file_.WriteAt(b.offset, block, b.bytes);
  }
}

}  // namespace llmplan::executor
