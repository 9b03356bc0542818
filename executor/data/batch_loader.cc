// BatchLoader: the sample order, the host-side read and vocabulary check, and
// the worker threads. The scheme is documented in batch_loader.h.
#include "executor/data/batch_loader.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <filesystem>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <utility>

#include "base/user_error.h"

namespace llmplan::data {

namespace {

// SplitMix64 (Steele et al.): a cheap, well-mixed 64-bit hash; the Feistel
// round function and the per-epoch key. Fixed arithmetic, so every host and
// every rank computes the same order.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr int kFeistelRounds = 4;

UserError OutOfVocabulary(const TokenFile& file, int64_t index, int64_t id, int64_t vocab) {
  return UserError(file.path() + ": token id " + std::to_string(id) + " at token " + std::to_string(index) +
                   " (byte offset " + std::to_string(file.ByteOffset(index)) + ") is >= the model's vocab size " +
                   std::to_string(vocab) +
                   ": tokenize the data with the model's tokenizer or pick a model with a larger vocab");
}

std::unique_ptr<TokenFile> OpenChecked(const BatchLoaderOptions& o) {
  if (o.seq_len < 1) throw UserError("sequence length must be >= 1 (got " + std::to_string(o.seq_len) + ")");
  if (o.micro_batch < 1) {
    throw UserError("micro-batch must be >= 1 (got " + std::to_string(o.micro_batch) + ")");
  }
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    throw UserError("rank " + std::to_string(o.rank) + " is not in a world of " + std::to_string(o.world) +
                    ": check RANK and WORLD_SIZE");
  }
  if (o.vocab < 1) throw UserError("the model's vocab must be >= 1 (got " + std::to_string(o.vocab) + ")");
  if (o.prefetch < 1) throw UserError("--loader-prefetch must be >= 1 (got " + std::to_string(o.prefetch) + ")");
  if (o.workers < 1 || o.workers > o.prefetch)
    throw UserError("--loader-workers must be between 1 and --loader-prefetch (" + std::to_string(o.prefetch) + "), got " +
                    std::to_string(o.workers) + ": a worker reads only what the prefetch depth leaves room for");
  auto file = std::make_unique<TokenFile>(o.path, o.format);
  if (file->size() < o.seq_len + 1) {
    throw UserError(o.path + ": " + std::to_string(file->size()) + " tokens, fewer than one sample of seq_len + 1 = " +
                    std::to_string(o.seq_len + 1) + ": use a shorter sequence length or more data");
  }
  // Every token a sample can read (the windows; not the tail that fills
  // none), checked before the first step: an id >= vocab near the end of the
  // file would otherwise stop the run only when a batch reached it, hours in.
  const int64_t used = (file->size() - 1) / o.seq_len * o.seq_len + 1;
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  const int64_t bad = file->FindTokenAtLeast(static_cast<uint32_t>(std::min<int64_t>(o.vocab, UINT32_MAX)), used, threads);
  if (bad >= 0) throw OutOfVocabulary(*file, bad, file->Token(bad), o.vocab);
  return file;
}

}  // namespace

// ---------------------------------------------------------------------------
// SampleOrder

SampleOrder::SampleOrder(int64_t num_tokens, int64_t seq_len, uint64_t seed, bool shuffle)
    : num_tokens_(num_tokens),
      seq_len_(seq_len),
      num_windows_((num_tokens - 1) / seq_len),
      seed_(seed),
      shuffle_(shuffle),
      half_bits_(1) {
  if (seq_len < 1 || num_windows_ < 1) {
    throw std::invalid_argument("SampleOrder needs num_tokens > seq_len >= 1");
  }
  while (half_bits_ < 31 && (int64_t{1} << (2 * half_bits_)) < num_windows_) ++half_bits_;
}

int64_t SampleOrder::Window(int64_t sample) const {
  const int64_t epoch = sample / num_windows_;
  const int64_t index = sample % num_windows_;
  if (!shuffle_) return index;
  // A balanced Feistel network is a bijection on [0, 2^(2h)) for any round
  // function; cycle-walking (re-encrypt until the value lands below W)
  // restricts it to a bijection on [0, W). The domain is < 4 W, so the
  // expected number of walks is under 4.
  const uint64_t key = SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(epoch) + 1));
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t x = static_cast<uint64_t>(index);
  do {
    uint64_t left = x >> half_bits_;
    uint64_t right = x & mask;
    for (int round = 0; round < kFeistelRounds; ++round) {
      const uint64_t f = SplitMix64(right ^ SplitMix64(key + static_cast<uint64_t>(round))) & mask;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<uint64_t>(num_windows_));
  return static_cast<int64_t>(x);
}

// ---------------------------------------------------------------------------
// ReadSamples

void MarkWindow(int64_t begin, int64_t length, const LossMaskFile* mask, const DocumentIndex* documents,
                int64_t* ids) {
  if (mask == nullptr && documents == nullptr) return;
  std::vector<uint8_t> bits(static_cast<size_t>(length));
  if (mask != nullptr) {
    // Token k of the window is target k - 1; the first is an input only.
    mask->Copy(begin, length, bits.data());
    for (int64_t k = 1; k < length; ++k)
      if (bits[static_cast<size_t>(k)] == 0) ids[k] |= executor::kUntrainedTarget;
  }
  if (documents != nullptr) {
    documents->MarkStarts(begin, length, bits.data());
    for (int64_t k = 0; k < length; ++k)
      if (bits[static_cast<size_t>(k)] != 0) ids[k] |= executor::kDocumentStart;
  }
}

at::Tensor ReadSamples(const TokenFile& file, const SampleOrder& order, int64_t first_sample,
                          int64_t micro_batch, int64_t vocab, bool pin_memory, const LossMaskFile* mask,
                          const DocumentIndex* documents) {
  const int64_t row = order.seq_len() + 1;
  at::Tensor tokens =
      at::empty({micro_batch, row}, at::TensorOptions().dtype(at::kLong).pinned_memory(pin_memory));
  int64_t* out = tokens.data_ptr<int64_t>();
  for (int64_t j = 0; j < micro_batch; ++j) {
    const int64_t begin = order.FirstToken(first_sample + j);
    const uint32_t max_id = file.Read(begin, row, out + j * row);
    if (static_cast<int64_t>(max_id) >= vocab) {
      // Cheap path above; only on failure look for the first offender.
      // (The loader checked the whole file when it opened it; this catches a
      // file rewritten since, and callers of ReadSamples alone.)
      for (int64_t k = 0; k < row; ++k)
        if (out[j * row + k] >= vocab) throw OutOfVocabulary(file, begin + k, out[j * row + k], vocab);
    }
    MarkWindow(begin, row, mask, documents, out + j * row);
  }
  return tokens;
}

// ---------------------------------------------------------------------------
// BatchLoader

BatchLoader::BatchLoader(const BatchLoaderOptions& options, DataPosition start)
    : options_(options),
      file_(OpenChecked(options)),
      order_(file_->size(), options.seq_len, options.seed, options.shuffle),
      pin_memory_(torch::cuda::is_available()),
      start_(start),
      position_(start) {
  // The mask beside the file, checked against its token count now (a mask
  // of another file is refused before the first step).
  const std::string mask_path = LossMaskPathFor(file_->path());
  if (std::filesystem::exists(mask_path)) mask_ = std::make_unique<LossMaskFile>(mask_path, file_->size());
  if (options_.document_attention) {
    const std::string docs_path = DocumentIndexPathFor(file_->path());
    if (!std::filesystem::exists(docs_path))
      throw UserError(file_->path() + " has no document index (" + docs_path +
                      "): prepare it with `llmplan data prepare`, or train with --attention window");
    documents_ = std::make_unique<DocumentIndex>(docs_path, file_->size());
  }
  if (start.next_sample < 0) {
    throw UserError("data position " + std::to_string(start.next_sample) + " is negative: the checkpoint is corrupt");
  }
  for (int w = 0; w < options_.workers; ++w) workers_.emplace_back([this] { Work(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  has_space_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void BatchLoader::Work() {
  const int64_t per_call = static_cast<int64_t>(options_.world) * options_.micro_batch;
  for (;;) {
    int64_t index = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      has_space_.wait(lock, [this] { return stop_ || claims_stopped_ || next_claim_ - next_take_ < options_.prefetch; });
      if (stop_ || claims_stopped_) return;
      index = next_claim_++;
    }
    // Read outside the lock: this is the slow part (page faults, copies), and
    // what several workers do at once.
    Item item;
    const int64_t next_sample = start_.next_sample + index * per_call;
    try {
      const int64_t first = next_sample + static_cast<int64_t>(options_.rank) * options_.micro_batch;
      item.batch.tokens =
          ReadSamples(*file_, order_, first, options_.micro_batch, options_.vocab, pin_memory_, mask_.get(),
                      documents_.get());
      item.batch.first_sample = first;
      item.batch.next.next_sample = next_sample + per_call;
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool failed = static_cast<bool>(item.error);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(index, std::move(item));
      // Nothing after an error is trustworthy: no worker claims another
      // batch; those already claimed (all before this one or after it) finish.
      if (failed) claims_stopped_ = true;
    }
    has_item_.notify_one();  // the consumer is the only waiter
    if (failed) {
      has_space_.notify_all();  // idle workers see claims_stopped_ and return
      return;
    }
  }
}

TokenBatch BatchLoader::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) std::rethrow_exception(failed_);
  // Every batch before the first failed one was claimed, so this wait ends:
  // with the batch, or with the error in its place.
  has_item_.wait(lock, [this] { return ready_.count(next_take_) != 0; });
  auto it = ready_.find(next_take_);
  Item item = std::move(it->second);
  ready_.erase(it);
  ++next_take_;
  if (item.error) {
    failed_ = item.error;
    std::rethrow_exception(failed_);
  }
  position_ = item.batch.next;
  lock.unlock();
  has_space_.notify_one();
  return std::move(item.batch);
}

DataPosition BatchLoader::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  return position_;
}

}  // namespace llmplan::data
