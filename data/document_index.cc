// Document index files: the writer, the checks on open and the lookups. The
// format is documented in document_index.h.
#include "data/document_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "base/user_error.h"

namespace llmplan::data {

static_assert(std::endian::native == std::endian::little, "document indexes are little-endian; this uses host order");

namespace {

// pread of exactly `bytes` at `offset` of `fd`; false when the file ends first.
bool ReadExactly(int fd, int64_t offset, int64_t bytes, void* out, const std::string& path) {
  auto* p = static_cast<unsigned char*>(out);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError(path + ": cannot read document index (" + std::strerror(errno) + ")");
    if (n == 0) return false;
    done += n;
  }
  return true;
}

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw UserError(path + ": " + what +
                  "; re-create it with `llmplan data prepare`, which writes it beside the token file");
}

// Closes a file descriptor when the reader returns or throws.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

}  // namespace

std::string DocumentIndexPathFor(const std::string& token_path) { return token_path + ".docs"; }

DocumentIndexWriter::DocumentIndexWriter(const std::string& path) : file_(path, "document index") {}

void DocumentIndexWriter::StartDocument(int64_t first_token) {
  // A broken order would be written, then refused by every reader: stop at the bug instead.
  if (starts_.empty() ? first_token != 0 : first_token <= starts_.back()) {
    throw std::logic_error("document index " + file_.path() + ": document start " + std::to_string(first_token) +
                           " after " + (starts_.empty() ? std::string("none") : std::to_string(starts_.back())));
  }
  starts_.push_back(first_token);
}

void DocumentIndexWriter::Commit(int64_t total_tokens) {
  if (starts_.empty() || total_tokens <= starts_.back()) {
    throw std::logic_error("document index " + file_.path() + ": " + std::to_string(starts_.size()) +
                           " documents in " + std::to_string(total_tokens) + " tokens");
  }
  uint8_t header[kDocumentIndexHeaderBytes] = {};
  const int64_t documents = this->documents();
  std::memcpy(header, kDocumentIndexMagic, 8);
  std::memcpy(header + 8, &kDocumentIndexVersion, 4);
  std::memcpy(header + 16, &total_tokens, 8);
  std::memcpy(header + 24, &documents, 8);
  file_.Write(header, sizeof(header));
  file_.Write(starts_.data(), starts_.size() * sizeof(int64_t));
  file_.Commit();
}

DocumentIndex::DocumentIndex(const std::string& path, int64_t expected_tokens) : path_(path) {
  // O_NONBLOCK: a FIFO would otherwise block the open (fstat refuses it below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) Fail(path, std::string("cannot open document index (") + std::strerror(errno) + ")");
  const FdCloser closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) Fail(path, "not a regular file");
  const int64_t file_bytes = st.st_size;
  if (file_bytes < kDocumentIndexHeaderBytes) {
    Fail(path, std::to_string(file_bytes) + " bytes is shorter than the " + std::to_string(kDocumentIndexHeaderBytes) +
         "-byte header: the file is truncated");
  }
  uint8_t header[kDocumentIndexHeaderBytes];
  if (!ReadExactly(fd, 0, sizeof(header), header, path)) Fail(path, "the file shrank while it was read");
  if (std::memcmp(header, kDocumentIndexMagic, 8) != 0) Fail(path, "not an llmplan document index (no LLMPDOCS magic)");
  uint32_t version = 0, reserved = 0;
  std::memcpy(&version, header + 8, 4);
  std::memcpy(&reserved, header + 12, 4);
  if (version != kDocumentIndexVersion) {
    Fail(path, "document index format version " + std::to_string(version) + ", this llmplan reads version " +
         std::to_string(kDocumentIndexVersion));
  }
  if (reserved != 0) Fail(path, "bytes 12..15 of the header are " + std::to_string(reserved) + ", not 0");
  int64_t documents = 0;
  std::memcpy(&num_tokens_, header + 16, 8);
  std::memcpy(&documents, header + 24, 8);
  if (documents < 1) Fail(path, "its header counts " + std::to_string(documents) + " documents, not at least 1");
  // Compared in documents, not bytes: 8 * a damaged count can overflow.
  const int64_t room = (file_bytes - kDocumentIndexHeaderBytes) / 8;
  if (documents != room || (file_bytes - kDocumentIndexHeaderBytes) % 8 != 0) {
    const bool short_file = documents > room;
    Fail(path, std::to_string(file_bytes) + " bytes, but " + std::to_string(documents) + " documents take " +
         (short_file && documents > (INT64_MAX - kDocumentIndexHeaderBytes) / 8
              ? std::string("more")
              : std::to_string(kDocumentIndexHeaderBytes + 8 * documents)) +
         (short_file ? ": the file is truncated" : ""));
  }
  if (num_tokens_ != expected_tokens) {
    Fail(path, "indexes " + std::to_string(num_tokens_) + " tokens but the token file beside it holds " +
         std::to_string(expected_tokens) + ": the index belongs to another token file");
  }
  starts_.resize(static_cast<size_t>(documents));
  if (!ReadExactly(fd, kDocumentIndexHeaderBytes, documents * 8, starts_.data(), path)) {
    Fail(path, "the file shrank while it was read");
  }
  if (starts_[0] != 0) Fail(path, "the first document starts at token " + std::to_string(starts_[0]) + ", not 0");
  for (size_t i = 1; i < starts_.size(); ++i) {
    if (starts_[i] <= starts_[i - 1]) {
      Fail(path, "document " + std::to_string(i) + " starts at token " + std::to_string(starts_[i]) +
           ", not after document " + std::to_string(i - 1) + " (" + std::to_string(starts_[i - 1]) + ")");
    }
  }
  if (starts_.back() >= num_tokens_) {
    Fail(path, "document " + std::to_string(starts_.size() - 1) + " starts at token " + std::to_string(starts_.back()) +
         ", past the last of the " + std::to_string(num_tokens_) + " tokens");
  }
}

int64_t DocumentIndex::Length(int64_t i) const {
  const auto at = static_cast<size_t>(i);
  return (at + 1 < starts_.size() ? starts_[at + 1] : num_tokens_) - starts_[at];
}

void DocumentIndex::MarkStarts(int64_t begin, int64_t count, uint8_t* out) const {
  if (count <= 0) return;
  std::memset(out, 0, static_cast<size_t>(count));
  for (auto it = std::lower_bound(starts_.begin(), starts_.end(), begin); it != starts_.end() && *it < begin + count;
       ++it) {
    out[*it - begin] = 1;
  }
}

int64_t DocumentIndex::CountLongerThan(int64_t tokens) const {
  int64_t longer = 0;
  for (int64_t i = 0; i < documents(); ++i) longer += Length(i) > tokens;
  return longer;
}

}  // namespace llmplan::data
