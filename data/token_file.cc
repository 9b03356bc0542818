// TokenFile: pread, format detection, header checks and the vocabulary scan. Formats are documented
// in token_file.h.
#include "data/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <thread>
#include <vector>

#include "base/user_error.h"

namespace llmplan::data {

// Token files are little-endian and we read them in place.
static_assert(std::endian::native == std::endian::little, "llmplan reads little-endian token files in place");

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Megatron's dtype codes (megatron/core/datasets/indexed_dataset.py DType).
constexpr uint8_t kMegatronInt32 = 4;
constexpr uint8_t kMegatronUint16 = 8;
constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

}  // namespace

TokenFileFormat ParseTokenFileFormat(const std::string& name) {
  if (name == "auto") return TokenFileFormat::kAuto;
  if (name == "u16" || name == "raw-u16") return TokenFileFormat::kRawU16;
  if (name == "u32" || name == "raw-u32") return TokenFileFormat::kRawU32;
  if (name == "llmc") return TokenFileFormat::kLlmc;
  if (name == "megatron") return TokenFileFormat::kMegatron;
  throw UserError("unknown token file format '" + name + "': use auto, u16, u32, llmc or megatron");
}

std::string TokenFileFormatName(TokenFileFormat format) {
  switch (format) {
    case TokenFileFormat::kAuto: return "auto";
    case TokenFileFormat::kRawU16: return "u16";
    case TokenFileFormat::kRawU32: return "u32";
    case TokenFileFormat::kLlmc: return "llmc";
    case TokenFileFormat::kMegatron: return "megatron";
  }
  return "?";
}

TokenFile::TokenFile(const std::string& path, TokenFileFormat format) : path_(path), format_(format) {
  std::string data_path = path;
  if (format == TokenFileFormat::kMegatron || format == TokenFileFormat::kAuto) {
    // Megatron names a dataset by prefix; accept prefix, prefix.bin or prefix.idx.
    std::string prefix = path;
    if (EndsWith(path, ".bin") || EndsWith(path, ".idx")) prefix = path.substr(0, path.size() - 4);
    const bool has_pair = FileExists(prefix + ".idx") && FileExists(prefix + ".bin");
    if (format == TokenFileFormat::kMegatron && !has_pair) {
      throw UserError(path + ": a Megatron dataset needs both " + prefix + ".bin and " + prefix +
                      ".idx; one is missing");
    }
    if (has_pair) {
      format_ = TokenFileFormat::kMegatron;
      data_path = prefix + ".bin";
      path_ = data_path;
    }
  }

  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever
  // (the fstat below then refuses it); pread on a regular file ignores it.
  fd_ = ::open(data_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) {
    throw UserError(data_path + ": cannot open token file (" + std::strerror(errno) +
                    "): check the path, or create it with `llmplan data prepare`");
  }
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw UserError(data_path + ": not a regular file: pass a token file");
  }
  file_bytes_ = st.st_size;
  if (file_bytes_ == 0) {
    ::close(fd_);
    fd_ = -1;
    throw UserError(data_path + ": token file is empty: re-create it with `llmplan data prepare`");
  }

  try {
    if (format_ == TokenFileFormat::kAuto) {
      // llm.c's magic and version as a raw uint16 stream would be four
      // specific token ids in a row: treat a match as the header.
      int32_t head[2] = {0, 0};
      if (file_bytes_ >= 8) ReadBytes(0, 8, head);
      if (head[0] == kLlmcMagicU16 || head[0] == kLlmcMagicU32) {
        format_ = TokenFileFormat::kLlmc;
      } else {
        RefuseDamagedLlmcHeader();
        format_ = EndsWith(path_, ".u32") ? TokenFileFormat::kRawU32 : TokenFileFormat::kRawU16;
      }
    }
    switch (format_) {
      case TokenFileFormat::kRawU16: OpenRaw(2); break;
      case TokenFileFormat::kRawU32: OpenRaw(4); break;
      case TokenFileFormat::kLlmc: OpenLlmc(); break;
      case TokenFileFormat::kMegatron: OpenMegatron(); break;
      case TokenFileFormat::kAuto: break;  // resolved above
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::ReadBytes(int64_t offset, int64_t bytes, void* out) const {
  auto* p = static_cast<unsigned char*>(out);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError(path_ + ": cannot read token file (" + std::strerror(errno) + ")");
    if (n == 0) {
      struct stat st;
      const int64_t now = ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
      throw UserError(path_ + ": the token file shrank from " + std::to_string(file_bytes_) + " to " +
                      std::to_string(now) + " bytes while training read it (truncated or being rewritten); "
                      "restore the file and start the run again");
    }
    done += n;
  }
}

void TokenFile::RefuseDamagedLlmcHeader() const {
  // An llm.c header is 256 int32: magic, version (1: uint16 tokens, 7:
  // uint32), token count, then zeros. When the magic is wrong but the rest is
  // exactly that — a known version and a count that matches the file's size —
  // the file is llm.c's with a damaged magic, and reading it as raw tokens
  // would train on 512 garbage tokens and a shifted stream without a word.
  if (file_bytes_ < kLlmcHeaderBytes) return;
  int32_t header[kLlmcHeaderInts];
  ReadBytes(0, kLlmcHeaderBytes, header);
  const int32_t version = header[1];
  if (version != 1 && version != 7) return;
  const int64_t width = version == 1 ? 2 : 4;
  const bool count_fits = header[2] > 0 && kLlmcHeaderBytes + int64_t{header[2]} * width == file_bytes_;
  bool zeros = true;
  for (int i = 3; i < kLlmcHeaderInts; ++i) zeros = zeros && header[i] == 0;
  if (!count_fits && !zeros) return;
  throw UserError(path_ + ": looks like an llm.c token file (version " + std::to_string(version) + ", " +
                  (count_fits ? std::to_string(header[2]) + " tokens, as its size says" : "a zero-filled header") +
                  ") but its magic is " + std::to_string(header[0]) + ", not " +
                  std::to_string(version == 1 ? kLlmcMagicU16 : kLlmcMagicU32) +
                  ": the header is damaged; re-create the file, or read it as raw tokens (format u16 or u32)");
}

void TokenFile::OpenRaw(int token_bytes) {
  token_bytes_ = token_bytes;
  data_offset_ = 0;
  const std::string width = token_bytes == 2 ? "uint16" : "uint32";
  if (file_bytes_ % token_bytes != 0) {
    throw UserError(path_ + ": " + std::to_string(file_bytes_) + " bytes is not a multiple of " +
                    std::to_string(token_bytes) + " (raw " + width +
                    " tokens): the file is truncated or has another format; re-create it or pass the right "
                    "format (u16, u32, llmc, megatron)");
  }
  num_tokens_ = file_bytes_ / token_bytes;
}

void TokenFile::OpenLlmc() {
  if (file_bytes_ < kLlmcHeaderBytes) {
    throw UserError(path_ + ": " + std::to_string(file_bytes_) + " bytes is shorter than llm.c's " +
                    std::to_string(kLlmcHeaderBytes) +
                    "-byte header: the file is truncated or is raw tokens (read it with format u16 or u32)");
  }
  int32_t header[3];
  ReadBytes(0, sizeof(header), header);
  if (header[0] == kLlmcMagicU16 && header[1] == 1) {
    token_bytes_ = 2;
  } else if (header[0] == kLlmcMagicU32 && header[1] == 7) {
    token_bytes_ = 4;
  } else if (header[0] == kLlmcMagicU16 || header[0] == kLlmcMagicU32) {
    throw UserError(path_ + ": llm.c header with magic " + std::to_string(header[0]) + " has version " +
                    std::to_string(header[1]) + " (expected " + (header[0] == kLlmcMagicU16 ? "1" : "7") +
                    "): re-create the file with llm.c's or llmplan's data preparation");
  } else {
    throw UserError(path_ + ": no llm.c header (magic " + std::to_string(header[0]) + ", expected " +
                    std::to_string(kLlmcMagicU16) + " or " + std::to_string(kLlmcMagicU32) +
                    "): read raw token files with format u16 or u32");
  }
  data_offset_ = kLlmcHeaderBytes;
  const int64_t count = header[2];
  if (count <= 0) {
    throw UserError(path_ + ": llm.c header says the file holds " + std::to_string(count) +
                    " tokens: the file is empty; re-create it");
  }
  const int64_t expected = kLlmcHeaderBytes + count * token_bytes_;
  if (file_bytes_ < expected) {
    throw UserError(path_ + ": truncated: the llm.c header says " + std::to_string(count) + " tokens (" +
                    std::to_string(expected) + " bytes) but the file has " + std::to_string(file_bytes_) +
                    " bytes; re-create or re-download it");
  }
  if (file_bytes_ > expected) {
    throw UserError(path_ + ": " + std::to_string(file_bytes_ - expected) +
                    " bytes after the " + std::to_string(count) +
                    " tokens the llm.c header counts: the header or the file is wrong; re-create it");
  }
  num_tokens_ = count;
}

void TokenFile::OpenMegatron() {
  const std::string idx_path = path_.substr(0, path_.size() - 4) + ".idx";
  std::ifstream idx(idx_path, std::ios::binary);
  if (!idx) throw UserError(idx_path + ": cannot open Megatron index");
  auto fail = [&](const std::string& what) {
    return UserError(idx_path + ": " + what + ": re-create the dataset with Megatron's preprocess_data.py");
  };
  char magic[9];
  uint64_t version = 0;
  uint8_t dtype = 0;
  uint64_t sequences = 0;
  uint64_t documents = 0;
  idx.read(magic, 9);
  idx.read(reinterpret_cast<char*>(&version), 8);
  idx.read(reinterpret_cast<char*>(&dtype), 1);
  idx.read(reinterpret_cast<char*>(&sequences), 8);
  idx.read(reinterpret_cast<char*>(&documents), 8);
  if (!idx) throw fail("truncated header");
  if (std::memcmp(magic, kMegatronMagic, 9) != 0) throw fail("not a Megatron index (bad magic)");
  if (version != 1) throw fail("index version " + std::to_string(version) + ", expected 1");
  if (dtype == kMegatronUint16) {
    token_bytes_ = 2;
  } else if (dtype == kMegatronInt32) {
    token_bytes_ = 4;  // ids are non-negative, so int32 reads as uint32
  } else {
    throw fail("token dtype code " + std::to_string(dtype) + " is not uint16 (8) or int32 (4)");
  }
  // Sequence lengths are int32; their sum is the token count the .bin must hold.
  if (sequences > static_cast<uint64_t>(file_bytes_)) throw fail("sequence count larger than the .bin");
  // The lengths must be in the index before they are allocated for: a damaged
  // count must not ask for gigabytes (a .bin of 20 GB allows 20e9 sequences).
  constexpr uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
  struct stat idx_st;
  if (::stat(idx_path.c_str(), &idx_st) == 0 &&
      sequences > (static_cast<uint64_t>(idx_st.st_size) - kHeaderBytes) / 4) {
    throw fail("truncated sequence lengths");
  }
  std::vector<int32_t> lengths(sequences);
  idx.read(reinterpret_cast<char*>(lengths.data()), static_cast<std::streamsize>(sequences * 4));
  if (!idx) throw fail("truncated sequence lengths");
  int64_t total = 0;
  for (int32_t n : lengths) {
    if (n < 0) throw fail("negative sequence length");
    total += n;
  }
  data_offset_ = 0;
  if (file_bytes_ % token_bytes_ != 0 || file_bytes_ / token_bytes_ != total) {
    throw UserError(path_ + ": " + std::to_string(file_bytes_) + " bytes but its index counts " +
                    std::to_string(total) + " tokens of " + std::to_string(token_bytes_) +
                    " bytes: the .bin is truncated or belongs to another index; re-create the dataset");
  }
  if (total == 0) throw fail("the dataset holds no tokens");
  num_tokens_ = total;
}

uint32_t TokenFile::Token(int64_t index) const {
  uint32_t t = 0;  // little-endian: a uint16 read into the low bytes
  ReadBytes(ByteOffset(index), token_bytes_, &t);
  return t;
}

namespace {

// Widens `count` little-endian tokens of type T at `raw` into out and returns
// their largest id. memcpy per element: the bytes need not be aligned for T,
// and the compiler turns this into plain (vectorised) loads.
template <typename T>
uint32_t Widen(const unsigned char* raw, int64_t count, int64_t* out) {
  T max_id = 0;
  for (int64_t i = 0; i < count; ++i) {
    T t;
    std::memcpy(&t, raw + sizeof(T) * i, sizeof(T));
    out[i] = t;
    max_id = t > max_id ? t : max_id;
  }
  return max_id;
}

// The largest of `count` tokens of type T at `raw` (the scan's inner loop).
template <typename T>
uint32_t MaxId(const unsigned char* raw, int64_t count) {
  T max_id = 0;
  for (int64_t i = 0; i < count; ++i) {
    T t;
    std::memcpy(&t, raw + sizeof(T) * i, sizeof(T));
    max_id = t > max_id ? t : max_id;
  }
  return max_id;
}

}  // namespace

uint32_t TokenFile::Read(int64_t begin, int64_t count, int64_t* out) const {
  // One pread per call (a sample is a few KB to a few hundred KB): the
  // buffer is reused across calls on the loader's thread.
  thread_local std::vector<unsigned char> buffer;
  const int64_t bytes = count * token_bytes_;
  if (static_cast<int64_t>(buffer.size()) < bytes) buffer.resize(static_cast<size_t>(bytes));
  ReadBytes(ByteOffset(begin), bytes, buffer.data());
  return token_bytes_ == 2 ? Widen<uint16_t>(buffer.data(), count, out) : Widen<uint32_t>(buffer.data(), count, out);
}

int64_t TokenFile::FindTokenAtLeast(uint32_t limit, int64_t end, int threads) const {
  // Blocks of 1 MiB of tokens; each thread takes every threads-th block and
  // records the first failing block it meets; the earliest of those wins.
  constexpr int64_t kBlockTokens = int64_t{1} << 19;
  const int64_t blocks = (end + kBlockTokens - 1) / kBlockTokens;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, blocks)));
  std::atomic<int64_t> first_bad_block{blocks};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto scan = [&](int t) {
    try {
      // A block's worth, or the whole range when it is shorter (a small file
      // costs no 2 MiB buffer per thread).
      std::vector<unsigned char> raw(static_cast<size_t>(std::min(kBlockTokens, end) * token_bytes_));
      for (int64_t b = t; b < blocks && b < first_bad_block.load(); b += threads) {
        const int64_t n = std::min(kBlockTokens, end - b * kBlockTokens);
        ReadBytes(ByteOffset(b * kBlockTokens), n * token_bytes_, raw.data());
        const uint32_t max_id =
            token_bytes_ == 2 ? MaxId<uint16_t>(raw.data(), n) : MaxId<uint32_t>(raw.data(), n);
        if (max_id >= limit) {
          int64_t seen = first_bad_block.load();
          while (b < seen && !first_bad_block.compare_exchange_weak(seen, b)) {
          }
          return;
        }
      }
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(scan, t);
  scan(0);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  const int64_t bad = first_bad_block.load();
  if (bad == blocks) return -1;
  const int64_t n = std::min(kBlockTokens, end - bad * kBlockTokens);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  Read(bad * kBlockTokens, n, ids.data());
  for (int64_t i = 0; i < n; ++i)
    if (ids[static_cast<size_t>(i)] >= static_cast<int64_t>(limit)) return bad * kBlockTokens + i;
  return -1;  // the block changed under us: nothing to report
}

}  // namespace llmplan::data
