#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/user_error.h"

namespace llmplan {

AtomicFile::AtomicFile(std::string path, std::string what)
    : path_(std::move(path)), what_(std::move(what)), temp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int error = errno;
    throw UserError("cannot write " + what_ + " to '" + path_ + "' (" + std::strerror(error) +
                    "): check the directory exists and is writable");
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::Fail(const std::string& doing, int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_.c_str());
  throw UserError(doing + " " + what_ + " '" + path_ + "' failed (" + std::strerror(error) +
                  "): check free space and permissions");
}

void AtomicFile::Write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // At most 1 GiB per call: Linux writes at most 0x7ffff000 bytes at once.
    const ssize_t n = ::write(fd_, p, bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail("writing", n < 0 ? errno : ENOSPC);
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::WriteAt(uint64_t offset, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) Fail("writing", n < 0 ? errno : ENOSPC);
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::Commit() {
  if (::fsync(fd_) != 0) Fail("writing", errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) Fail("writing", errno);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) Fail("moving into place", errno);
  committed_ = true;
}

void WriteFileAtomically(const std::string& path, const std::string& contents, const std::string& what) {
  AtomicFile file(path, what);
  file.Write(contents);
  file.Commit();
}

}  // namespace llmplan
