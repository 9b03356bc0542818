// Document index: where each document of a token file begins. A sidecar file
// beside the token file (DocumentIndexPathFor), written by `llmplan data
// prepare` for every file it makes (a text file, a --split-on-line piece, a
// --jsonl object or a --chat conversation is one document), so that `llmplan
// run --attention documents` can keep attention inside each document of a
// packed window and restart positions at each one.
//
// Format (little-endian):
//   bytes 0..7    magic "LLMPDOCS"
//   bytes 8..11   uint32 format version, 1
//   bytes 12..15  uint32 zero (reserved)
//   bytes 16..23  int64 token count n: the token file's count, checked on open
//   bytes 24..31  int64 document count d >= 1
//   bytes 32..    d int64 first-token indices, strictly ascending, the first
//                 0, every one < n. Document i is tokens [start[i],
//                 start[i + 1]) (the last one ends at n).
// Eight bytes a document: 2.5 million documents of a 10 GB corpus take 20 MB,
// read whole into memory when the file is opened.
//
// Every problem with a file is a UserError with one line that names it and
// says what to change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/atomic_file.h"

namespace llmplan::data {

inline constexpr char kDocumentIndexMagic[8] = {'L', 'L', 'M', 'P', 'D', 'O', 'C', 'S'};
inline constexpr uint32_t kDocumentIndexVersion = 1;
inline constexpr int64_t kDocumentIndexHeaderBytes = 32;

// The index's path for a token file: token_path + ".docs".
std::string DocumentIndexPathFor(const std::string& token_path);

// Writes a document index through an AtomicFile: `path` holds the old file
// or the whole new one, never a partial one.
class DocumentIndexWriter {
 public:
  // Throws UserError when the file cannot be created.
  explicit DocumentIndexWriter(const std::string& path);

  // Records that a document begins at token `first_token` of the token file.
  // REQUIRES: the first call passes 0; each later one a larger index than
  // the call before (an empty document adds nothing: do not call for it).
  void StartDocument(int64_t first_token);
  int64_t documents() const { return static_cast<int64_t>(starts_.size()); }

  // Writes the file for a token file of `total_tokens` tokens, fsyncs and
  // renames over the path.
  // REQUIRES: documents() >= 1 and total_tokens > the last start.
  // Throws UserError when a write fails.
  void Commit(int64_t total_tokens);

 private:
  AtomicFile file_;
  std::vector<int64_t> starts_;
};

class DocumentIndex {
 public:
  // Reads `path` whole and checks it against the token file it belongs to.
  // REQUIRES: expected_tokens > 0 (TokenFile::size()). Throws UserError when
  // the file is missing, unreadable, truncated or longer than its counts
  // say, has another magic or version, counts another number of tokens than
  // expected_tokens, or its starts are not 0 then strictly ascending below
  // the token count.
  DocumentIndex(const std::string& path, int64_t expected_tokens);

  const std::string& path() const { return path_; }
  int64_t tokens() const { return num_tokens_; }
  int64_t documents() const { return static_cast<int64_t>(starts_.size()); }
  const std::vector<int64_t>& starts() const { return starts_; }
  // Length of document i. REQUIRES: 0 <= i < documents().
  int64_t Length(int64_t i) const;

  // Writes 1 into out[j] when token begin + j starts a document, else 0, for
  // j in [0, count). REQUIRES: 0 <= begin, count >= 0, begin + count <=
  // tokens(). O(log documents + count).
  void MarkStarts(int64_t begin, int64_t count, uint8_t* out) const;

  // Documents longer than `tokens` tokens (a window of that many splits them).
  int64_t CountLongerThan(int64_t tokens) const;

 private:
  std::string path_;
  int64_t num_tokens_ = 0;
  std::vector<int64_t> starts_;
};

}  // namespace llmplan::data
