// Loss mask files: the writer, the header checks and pread of bits. The
// format is documented in loss_mask.h.
#include "data/loss_mask.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/user_error.h"
#include "data/token_file.h"

namespace llmplan::data {

static_assert(std::endian::native == std::endian::little, "loss masks are little-endian; this writes host order");

namespace {

// 4 MiB of bits (32 Mi tokens) per write and per counting read.
constexpr size_t kBufferBytes = size_t{4} << 20;

int64_t MaskBytes(int64_t tokens) { return (tokens + 7) / 8; }

}  // namespace

std::string LossMaskPathFor(const std::string& token_path) { return token_path + ".lossmask"; }

std::optional<double> TrainedShareOf(const std::string& token_path) {
  const std::string path = LossMaskPathFor(token_path);
  if (!std::filesystem::exists(path)) return std::nullopt;
  const LossMaskFile mask(path, TokenFile(token_path).size());
  return static_cast<double>(mask.trained()) / static_cast<double>(mask.size());
}

LossMaskWriter::LossMaskWriter(const std::string& path) : file_(path, "loss mask") {
  // A placeholder; the header with the count is written on Commit().
  const uint8_t zeros[kLossMaskHeaderBytes] = {};
  file_.Write(zeros, sizeof(zeros));
  buffer_.reserve(kBufferBytes);
}

void LossMaskWriter::Add(bool trained) {
  if (trained) {
    partial_ |= static_cast<uint8_t>(1u << (count_ % 8));
    ++trained_;
  }
  ++count_;
  if (count_ % 8 == 0) {
    buffer_.push_back(partial_);
    partial_ = 0;
    if (buffer_.size() == kBufferBytes) Flush();
  }
}

void LossMaskWriter::Flush() {
  file_.Write(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void LossMaskWriter::Commit() {
  if (count_ % 8 != 0) buffer_.push_back(partial_);  // the last byte's unused bits are 0
  Flush();
  uint8_t header[kLossMaskHeaderBytes] = {};
  std::memcpy(header, kLossMaskMagic, 8);
  std::memcpy(header + 8, &kLossMaskVersion, 4);
  std::memcpy(header + 16, &count_, 8);
  file_.WriteAt(0, header, sizeof(header));
  file_.Commit();
}

LossMaskFile::LossMaskFile(const std::string& path, int64_t expected_tokens) : path_(path) {
  // O_NONBLOCK: a FIFO would otherwise block the open (fstat refuses it below).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) {
    throw UserError(path + ": cannot open loss mask (" + std::strerror(errno) +
                    "): re-create it with `llmplan data prepare --chat`, or remove it to train on every token");
  }
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) Fail("not a regular file");
    file_bytes_ = st.st_size;
    if (file_bytes_ < kLossMaskHeaderBytes) {
      Fail(std::to_string(file_bytes_) + " bytes is shorter than the " + std::to_string(kLossMaskHeaderBytes) +
           "-byte header: the file is truncated");
    }
    uint8_t header[kLossMaskHeaderBytes];
    ReadBytes(0, sizeof(header), header);
    if (std::memcmp(header, kLossMaskMagic, 8) != 0) Fail("not an llmplan loss mask (no LLMPMASK magic)");
    uint32_t version = 0;
    std::memcpy(&version, header + 8, 4);
    if (version != kLossMaskVersion) {
      Fail("loss mask format version " + std::to_string(version) + ", this llmplan reads version " +
           std::to_string(kLossMaskVersion));
    }
    std::memcpy(&num_tokens_, header + 16, 8);
    if (num_tokens_ <= 0) Fail("its header counts " + std::to_string(num_tokens_) + " tokens");
    if (num_tokens_ / 8 > file_bytes_) {  // before ceil(n / 8) can overflow
      Fail("its header counts " + std::to_string(num_tokens_) + " tokens but the file has " +
           std::to_string(file_bytes_) + " bytes: the file is truncated");
    }
    const int64_t expected_bytes = kLossMaskHeaderBytes + MaskBytes(num_tokens_);
    if (file_bytes_ != expected_bytes) {
      Fail(std::to_string(file_bytes_) + " bytes, but " + std::to_string(num_tokens_) + " tokens take " +
           std::to_string(expected_bytes) + (file_bytes_ < expected_bytes ? ": the file is truncated" : ""));
    }
    if (num_tokens_ != expected_tokens) {
      Fail("masks " + std::to_string(num_tokens_) + " tokens but the token file beside it holds " +
           std::to_string(expected_tokens) + ": the mask belongs to another token file");
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

LossMaskFile::~LossMaskFile() {
  if (fd_ >= 0) ::close(fd_);
}

void LossMaskFile::Fail(const std::string& what) const {
  throw UserError(path_ + ": " + what +
                  "; re-create it with `llmplan data prepare --chat`, or remove it to train on every token");
}

void LossMaskFile::ReadBytes(int64_t offset, int64_t bytes, void* out) const {
  auto* p = static_cast<unsigned char*>(out);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError(path_ + ": cannot read loss mask (" + std::strerror(errno) + ")");
    if (n == 0) {
      throw UserError(path_ + ": the loss mask shrank from " + std::to_string(file_bytes_) +
                      " bytes while it was read (truncated or being rewritten); restore it and start again");
    }
    done += n;
  }
}

int64_t LossMaskFile::trained() const {
  std::call_once(counted_, [this] {
    std::vector<uint8_t> buffer(static_cast<size_t>(std::min<int64_t>(kBufferBytes, MaskBytes(num_tokens_))));
    int64_t ones = 0;
    for (int64_t at = 0; at < MaskBytes(num_tokens_); at += static_cast<int64_t>(buffer.size())) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(buffer.size()), MaskBytes(num_tokens_) - at);
      ReadBytes(kLossMaskHeaderBytes + at, n, buffer.data());
      // The last byte's unused bits are not tokens: only bits below num_tokens_ count.
      if (at + n == MaskBytes(num_tokens_) && num_tokens_ % 8 != 0) {
        buffer[static_cast<size_t>(n - 1)] &= static_cast<uint8_t>((1u << (num_tokens_ % 8)) - 1);
      }
      for (int64_t i = 0; i < n; ++i) ones += std::popcount(buffer[static_cast<size_t>(i)]);
    }
    trained_ = ones;
  });
  return trained_;
}

void LossMaskFile::Copy(int64_t begin, int64_t count, uint8_t* out) const {
  if (count <= 0) return;
  // One pread of the bytes that hold the range; the buffer is reused across
  // calls on the loader's thread.
  thread_local std::vector<uint8_t> buffer;
  const int64_t first = begin / 8;
  const int64_t bytes = (begin + count - 1) / 8 - first + 1;
  if (static_cast<int64_t>(buffer.size()) < bytes) buffer.resize(static_cast<size_t>(bytes));
  ReadBytes(kLossMaskHeaderBytes + first, bytes, buffer.data());
  for (int64_t i = 0; i < count; ++i) {
    const int64_t bit = begin + i - first * 8;
    out[i] = static_cast<uint8_t>((buffer[static_cast<size_t>(bit / 8)] >> (bit % 8)) & 1);
  }
}

}  // namespace llmplan::data
