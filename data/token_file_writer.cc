#include "data/token_file_writer.h"

#include <bit>
#include <cstring>

#include "base/user_error.h"
#include "data/token_file.h"

namespace llmplan::data {

namespace {

static_assert(std::endian::native == std::endian::little, "token files are little-endian; this writes host order");

// 1 Mi tokens per write: large sequential writes, 4 MiB of buffer at most.
constexpr size_t kBufferTokens = size_t{1} << 20;

}  // namespace

TokenFileWriter::TokenFileWriter(const std::string& path, bool llmc_header, int token_bytes)
    : file_(path, "token file"), llmc_(llmc_header), token_bytes_(token_bytes) {
  if (token_bytes != 2 && token_bytes != 4) throw UserError("token width must be 2 or 4 bytes");
  if (llmc_) {
    // A placeholder; the header with the count is written on Commit().
    const std::vector<int32_t> zeros(kLlmcHeaderInts, 0);
    file_.Write(zeros.data(), zeros.size() * 4);
  }
  buffer_.reserve(kBufferTokens);
}

void TokenFileWriter::Add(uint32_t token) {
  if (token_bytes_ == 2 && token > 0xffff) {
    throw UserError("token id " + std::to_string(token) + " does not fit 2-byte tokens: write 4-byte tokens (u32)");
  }
  buffer_.push_back(token);
  if (buffer_.size() == kBufferTokens) Flush();
}

void TokenFileWriter::Flush() {
  if (llmc_ && count() > INT32_MAX) {
    throw UserError("more than 2^31 - 1 tokens do not fit llm.c's int32 header count: write raw tokens instead");
  }
  buffer_bytes_.resize(buffer_.size() * static_cast<size_t>(token_bytes_));
  if (token_bytes_ == 2) {
    for (size_t i = 0; i < buffer_.size(); ++i) {
      const uint16_t v = static_cast<uint16_t>(buffer_[i]);
      std::memcpy(buffer_bytes_.data() + 2 * i, &v, 2);
    }
  } else {
    std::memcpy(buffer_bytes_.data(), buffer_.data(), buffer_bytes_.size());
  }
  file_.Write(buffer_bytes_.data(), buffer_bytes_.size());
  flushed_ += static_cast<int64_t>(buffer_.size());
  buffer_.clear();
}

void TokenFileWriter::Commit() {
  Flush();
  if (llmc_) {
    int32_t header[kLlmcHeaderInts] = {};
    header[0] = token_bytes_ == 2 ? kLlmcMagicU16 : kLlmcMagicU32;
    header[1] = token_bytes_ == 2 ? 1 : 7;
    header[2] = static_cast<int32_t>(flushed_);
    file_.WriteAt(0, header, sizeof(header));
  }
  file_.Commit();
}

}  // namespace llmplan::data
