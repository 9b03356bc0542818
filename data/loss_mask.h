// Loss mask: which tokens of a token file are trained as targets. A sidecar
// file beside the token file (LossMaskPathFor), written by `llmplan data
// prepare --chat` so that fine-tuning learns the assistant's answers and not
// the prompts: bit i = 1 means the loss of predicting token i from the tokens
// before it counts; 0 means token i contributes nothing (it is still input).
// A token file without a mask trains every token.
//
// Format (little-endian):
//   bytes 0..7    magic "LLMPMASK"
//   bytes 8..11   uint32 format version, 1
//   bytes 12..15  uint32 zero (reserved)
//   bytes 16..23  int64 token count n: the token file's count, checked on open
//   bytes 24..    ceil(n / 8) bytes, one bit per token, least-significant bit
//                 first (token i is bit i % 8 of byte i / 8); the unused bits
//                 of the last byte are 0.
// One bit a token: a 10 GB corpus of uint32 tokens has a 312 MB mask.
//
// Read with pread like TokenFile (token_file.h says why not mmap); every
// problem with a file is a UserError with one line that names it and says
// what to change.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/atomic_file.h"

namespace llmplan::data {

inline constexpr char kLossMaskMagic[8] = {'L', 'L', 'M', 'P', 'M', 'A', 'S', 'K'};
inline constexpr uint32_t kLossMaskVersion = 1;
inline constexpr int64_t kLossMaskHeaderBytes = 24;

// The mask's path for a token file: token_path + ".lossmask".
std::string LossMaskPathFor(const std::string& token_path);

// The share of a token file's tokens its mask trains (trained / count), or
// nullopt when no mask lies beside it: what the planner scales the head's
// work by (planner/plan.h, Plan::trained_fraction). Opens the token file and
// the mask and counts the mask's bits; throws UserError as TokenFile and
// LossMaskFile do.
std::optional<double> TrainedShareOf(const std::string& token_path);

// Writes a loss mask through an AtomicFile: `path` holds the old file or the
// whole new one, never a partial one.
class LossMaskWriter {
 public:
  // Throws UserError when the file cannot be created.
  explicit LossMaskWriter(const std::string& path);

  // Appends one token's bit.
  void Add(bool trained);
  int64_t count() const { return count_; }
  // Tokens added with trained = true.
  int64_t trained() const { return trained_; }

  // Writes the header with count(), fsyncs and renames over the path.
  // Throws UserError when a write fails.
  void Commit();

 private:
  void Flush();

  AtomicFile file_;
  std::vector<uint8_t> buffer_;  // whole bytes not yet written
  uint8_t partial_ = 0;          // the bits of the byte being filled
  int64_t count_ = 0;
  int64_t trained_ = 0;
};

class LossMaskFile {
 public:
  // Opens `path` read-only and checks it against the token file it belongs
  // to. REQUIRES: expected_tokens > 0 (TokenFile::size()). Throws UserError
  // when the file is missing, unreadable, not a regular file, truncated or
  // longer than its count says, has another magic or version, or counts
  // another number of tokens than expected_tokens.
  LossMaskFile(const std::string& path, int64_t expected_tokens);
  ~LossMaskFile();

  LossMaskFile(const LossMaskFile&) = delete;
  LossMaskFile& operator=(const LossMaskFile&) = delete;

  const std::string& path() const { return path_; }
  // Number of tokens (== expected_tokens).
  int64_t size() const { return num_tokens_; }
  // Number of 1 bits: counted on the first call (a pass over the file),
  // then remembered. Thread-safe. Throws UserError if the file has shrunk.
  int64_t trained() const;

  // Writes 1 (trained) or 0 for tokens [begin, begin + count) into
  // out[0..count). Thread-safe.
  // REQUIRES: 0 <= begin, count >= 0, begin + count <= size(). Throws
  // UserError if the file has shrunk since it was opened.
  void Copy(int64_t begin, int64_t count, uint8_t* out) const;

 private:
  // pread of exactly `bytes` at `offset`; a short read is the file shrinking.
  void ReadBytes(int64_t offset, int64_t bytes, void* out) const;
  [[noreturn]] void Fail(const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  int64_t num_tokens_ = 0;
  mutable std::once_flag counted_;
  mutable int64_t trained_ = 0;
};

}  // namespace llmplan::data
