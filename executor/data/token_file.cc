// TokenFile: mmap, format detection and header checks. Formats are documented
// in token_file.h.
#include "executor/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "planner/user_error.h"

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

  fd_ = ::open(data_path.c_str(), O_RDONLY | O_CLOEXEC);
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
  void* map = ::mmap(nullptr, static_cast<size_t>(file_bytes_), PROT_READ, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw UserError(data_path + ": cannot mmap token file (" + std::strerror(err) + ")");
  }
  map_ = static_cast<const unsigned char*>(map);

  try {
    if (format_ == TokenFileFormat::kAuto) {
      // llm.c's magic and version as a raw uint16 stream would be four
      // specific token ids in a row: treat a match as the header.
      int32_t head[2] = {0, 0};
      if (file_bytes_ >= 8) std::memcpy(head, map_, 8);
      if (head[0] == kLlmcMagicU16 || head[0] == kLlmcMagicU32) {
        format_ = TokenFileFormat::kLlmc;
      } else {
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
    ::munmap(const_cast<unsigned char*>(map_), static_cast<size_t>(file_bytes_));
    ::close(fd_);
    map_ = nullptr;
    fd_ = -1;
    throw;
  }
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), static_cast<size_t>(file_bytes_));
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::OpenRaw(int token_bytes) {
  token_bytes_ = token_bytes;
  data_offset_ = 0;
  const std::string width = token_bytes == 2 ? "uint16" : "uint32";
  if (file_bytes_ % token_bytes != 0) {
    throw UserError(path_ + ": " + std::to_string(file_bytes_) + " bytes is not a multiple of " +
                    std::to_string(token_bytes) + " (raw " + width +
                    " tokens): the file is truncated or has another format; re-create it or pass the right "
                    "--data-format (u16, u32, llmc, megatron)");
  }
  num_tokens_ = file_bytes_ / token_bytes;
}

void TokenFile::OpenLlmc() {
  if (file_bytes_ < kLlmcHeaderBytes) {
    throw UserError(path_ + ": " + std::to_string(file_bytes_) + " bytes is shorter than llm.c's " +
                    std::to_string(kLlmcHeaderBytes) +
                    "-byte header: the file is truncated or is raw tokens (pass --data-format u16 or u32)");
  }
  int32_t header[3];
  std::memcpy(header, map_, sizeof(header));
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
                    "): pass --data-format u16 or u32 for raw token files");
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
  const unsigned char* p = map_ + data_offset_ + index * token_bytes_;
  if (token_bytes_ == 2) {
    uint16_t t;
    std::memcpy(&t, p, 2);
    return t;
  }
  uint32_t t;
  std::memcpy(&t, p, 4);
  return t;
}

uint32_t TokenFile::Read(int64_t begin, int64_t count, int64_t* out) const {
  const unsigned char* p = map_ + data_offset_ + begin * token_bytes_;
  uint32_t max_id = 0;
  // memcpy per element: the mapped data need not be aligned for the type,
  // and the compiler turns this into plain loads.
  if (token_bytes_ == 2) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t t;
      std::memcpy(&t, p + 2 * i, 2);
      out[i] = t;
      max_id = t > max_id ? t : max_id;
    }
  } else {
    for (int64_t i = 0; i < count; ++i) {
      uint32_t t;
      std::memcpy(&t, p + 4 * i, 4);
      out[i] = t;
      max_id = t > max_id ? t : max_id;
    }
  }
  return max_id;
}

}  // namespace llmplan::data
