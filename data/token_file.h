// TokenFile: a read-only file of token ids, addressed by token index. Tokens
// are read with pread() as the loader asks for them, so a 20 GB corpus costs no
// RAM up front and several processes (one per GPU) share the same page cache.
// Not mmap: a mapped file that is truncated while training reads it kills the
// process with SIGBUS; a short pread() is an error that can say what happened.
// The copy costs 4.7 us per 4,097-token sample instead of mmap's 2.8 us (dev
// machine, page cache): microseconds per step, on the loader's thread.
//
// Formats (what users already have on disk):
//   raw uint16 / uint32   nanoGPT: no header, tokens back to back, little-endian.
//   llm.c .bin            256 x int32 header: magic 20240520 version 1 -> uint16
//                         tokens; magic 20240801 version 7 -> uint32 tokens (its
//                         Llama-3 variant); header[2] = token count.
//   Megatron .bin/.idx    indexed dataset: the .idx names the dtype (uint16 or
//                         int32) and the sequence lengths; the .bin holds the
//                         tokens. Documents are read as one concatenated stream.
//
// Every problem with a file (missing, empty, truncated, bad header) is a
// UserError with one line that names the file and says what to change. An
// llm.c header whose magic is damaged (the version and token count still fit
// the file) is refused rather than read as raw tokens.
#pragma once

#include <cstdint>
#include <string>

namespace llmplan::data {

enum class TokenFileFormat {
  kAuto,      // llm.c when the header's magic and version match; Megatron when a
              // sibling .idx exists; otherwise raw, uint32 for *.u32, else uint16
  kRawU16,    // nanoGPT-style uint16
  kRawU32,    // uint32 (vocabularies over 65,536 tokens)
  kLlmc,      // llm.c headered .bin (either magic)
  kMegatron,  // Megatron-LM indexed dataset (path is the .bin, the .idx, or the prefix)
};

// Parses "auto", "u16", "u32", "llmc", "megatron" (as given to --data-format).
// Throws UserError naming the accepted spellings.
TokenFileFormat ParseTokenFileFormat(const std::string& name);
std::string TokenFileFormatName(TokenFileFormat format);

// llm.c's header: 256 little-endian int32, the first three used.
inline constexpr int kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;
inline constexpr int32_t kLlmcMagicU16 = 20240520;  // version 1, uint16 tokens
inline constexpr int32_t kLlmcMagicU32 = 20240801;  // version 7, uint32 tokens

class TokenFile {
 public:
  // Opens `path` read-only.
  // REQUIRES: nothing. Throws UserError when the file is missing, unreadable,
  // not a regular file, empty, truncated (size not a multiple of the token
  // width, or shorter than its header says) or its header is not what
  // `format` expects (with kAuto: an llm.c header with a damaged magic).
  explicit TokenFile(const std::string& path, TokenFileFormat format = TokenFileFormat::kAuto);
  ~TokenFile();

  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  // The format actually read (never kAuto).
  TokenFileFormat format() const { return format_; }
  // Number of tokens (> 0).
  int64_t size() const { return num_tokens_; }
  // Bytes per token: 2 or 4.
  int token_bytes() const { return token_bytes_; }
  // Byte offset in the file of token `index` (for error messages a user can
  // check with xxd / od).
  // REQUIRES: 0 <= index <= size().
  int64_t ByteOffset(int64_t index) const { return data_offset_ + index * token_bytes_; }

  // REQUIRES: 0 <= index < size(). Throws UserError if the file has shrunk.
  uint32_t Token(int64_t index) const;

  // Copies tokens [begin, begin + count) into out[0..count), widened to int64
  // (what embedding lookups take), and returns the largest id copied (so the
  // caller can check it against the vocabulary in the same pass). Thread-safe.
  // REQUIRES: 0 <= begin, count >= 0, begin + count <= size(). Throws
  // UserError if the file has shrunk since it was opened (truncated while
  // training reads it).
  uint32_t Read(int64_t begin, int64_t count, int64_t* out) const;

  // The index of the first token in [0, end) whose id is >= limit, or -1 if
  // there is none. Reads that range once, in large blocks on up to `threads`
  // threads (a max per block, vectorised; only a block that fails is searched
  // token by token): 3.7 GB/s on one thread of the dev machine from the page
  // cache (a 1 GB file in 0.29 s); threads help where memory bandwidth is spare.
  // REQUIRES: 0 <= end <= size(), threads >= 1. Throws UserError if the file
  // has shrunk.
  int64_t FindTokenAtLeast(uint32_t limit, int64_t end, int threads) const;

 private:
  void OpenRaw(int token_bytes);
  void OpenLlmc();
  void OpenMegatron();
  // With kAuto: throws UserError if the file is llm.c's with a damaged magic.
  void RefuseDamagedLlmcHeader() const;
  // pread of exactly `bytes` at `offset`; a short read is the file shrinking.
  void ReadBytes(int64_t offset, int64_t bytes, void* out) const;

  std::string path_;
  TokenFileFormat format_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;  // the size when opened
  int64_t data_offset_ = 0;  // bytes before token 0 (llm.c header)
  int64_t num_tokens_ = 0;
  int token_bytes_ = 2;
};

}  // namespace llmplan::data
