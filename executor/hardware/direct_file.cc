#include "executor/hardware/direct_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "base/user_error.h"
#include "base/format.h"

namespace llmplan::executor {

AlignedBuffer::AlignedBuffer(int64_t bytes) : bytes_(bytes) {
  if (bytes <= 0) return;
  if (posix_memalign(&data_, static_cast<size_t>(kDirectAlignment), static_cast<size_t>(bytes)) != 0) {
    data_ = nullptr;
    throw UserError("cannot allocate " + FormatBytes(static_cast<double>(bytes)) + " of host memory for disk blocks");
  }
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DirectFile::DirectFile(std::string path, bool truncate, bool try_direct) : path_(std::move(path)) {
  Open(try_direct, truncate);
}

DirectFile::~DirectFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DirectFile::Open(bool direct, bool truncate) {
  if (fd_ >= 0) ::close(fd_);
  const int flags = O_RDWR | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0);
  fd_ = direct ? ::open(path_.c_str(), flags | O_DIRECT, 0644) : -1;
  direct_ = fd_ >= 0;
  // EINVAL: this filesystem has no O_DIRECT (tmpfs); any other error the
  // buffered open reports again.
  if (fd_ < 0) fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) throw UserError("cannot open " + path_ + ": " + std::strerror(errno));
}

void DirectFile::Allocate(int64_t bytes) {
  if (bytes <= 0) return;
  const int err = ::posix_fallocate(fd_, 0, bytes);
  if (err != 0) {
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    const int64_t free = FreeDiskBytes(dir.empty() ? "." : dir);
    throw UserError("cannot reserve " + FormatBytes(static_cast<double>(bytes)) + " for " + path_ + ": " +
                    std::strerror(err) +
                    (free >= 0 ? " (" + FormatBytes(static_cast<double>(free)) + " free there)" : std::string()));
  }
  if (!direct_) return;
  // Some filesystems accept O_DIRECT at open and refuse the transfers.
  AlignedBuffer probe(kDirectAlignment);
  if (::pread(fd_, probe.data(), kDirectAlignment, 0) < 0) {
    if (errno != EINVAL) throw UserError("cannot read " + path_ + ": " + std::strerror(errno));
    Open(/*direct=*/false, /*truncate=*/false);
  }
}

void DirectFile::ReadAt(int64_t offset, void* buffer, int64_t bytes) const {
  char* p = static_cast<char*>(buffer);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError("cannot read " + path_ + ": " + std::strerror(errno));
    if (n == 0) throw UserError("cannot read " + path_ + ": it ends before byte " + std::to_string(offset + bytes));
    p += n, offset += n, bytes -= n;
  }
}

void DirectFile::WriteAt(int64_t offset, const void* buffer, int64_t bytes) const {
  const char* p = static_cast<const char*>(buffer);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw UserError("cannot write " + path_ + ": " + std::strerror(n < 0 ? errno : EIO));
    p += n, offset += n, bytes -= n;
  }
}

void DirectFile::Sync() const {
  if (::fdatasync(fd_) != 0) throw UserError("cannot flush " + path_ + ": " + std::strerror(errno));
}

int64_t FreeDiskBytes(const std::string& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return -1;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

}  // namespace llmplan::executor
