// TokenFileWriter: writes a token file that TokenFile (token_file.h) reads —
// llm.c's headered .bin or raw little-endian ids, 2 or 4 bytes per token —
// streamed through an AtomicFile, so `--out` holds the old file or the whole
// new one, never a partial one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/atomic_file.h"

namespace llmplan::data {

class TokenFileWriter {
 public:
  // `llmc_header`: llm.c's 256-int32 header (magic 20240520 version 1 for 2-byte
  // tokens, 20240801 version 7 for 4-byte ones), else raw ids.
  // REQUIRES: token_bytes is 2 or 4. Throws UserError when the file cannot be
  // created.
  TokenFileWriter(const std::string& path, bool llmc_header, int token_bytes);

  // Appends one id. Throws UserError when it does not fit token_bytes (an id
  // of 65,536 or more needs 4-byte tokens), or when the write fails.
  void Add(uint32_t token);
  int64_t count() const { return flushed_ + static_cast<int64_t>(buffer_.size()); }

  // Writes the header, fsyncs and renames over the path. Throws UserError
  // when llm.c's int32 count cannot hold count() or a write fails.
  void Commit();

 private:
  void Flush();

  AtomicFile file_;
  bool llmc_;
  int token_bytes_;
  std::vector<uint8_t> buffer_bytes_;  // little-endian ids waiting to be written
  std::vector<uint32_t> buffer_;       // ids not yet encoded
  int64_t flushed_ = 0;
};

}  // namespace llmplan::data
