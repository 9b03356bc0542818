// DirectFile: a file on a local SSD read and written in large aligned blocks
// that bypass the page cache (O_DIRECT) — how NVMe offload streams AdamW's
// state and how `llmplan profile` measures the disk. Through the page cache
// the kernel would keep a second copy of state that is on the disk exactly
// because host memory is short, and a measured read would be RAM's speed.
//
// Where the filesystem refuses O_DIRECT (tmpfs before Linux 6.6, some
// network and overlay filesystems) the file works buffered instead: direct() says which, so the
// caller can say so once.
//
// AlignedBuffer: host memory aligned for O_DIRECT transfers.
#pragma once

#include <cstdint>
#include <string>

#include "planner/nvme_offload.h"

namespace llmplan::executor {

// Offsets, lengths and buffer addresses of DirectFile transfers are
// multiples of this (the logical block of any SSD: 512 B or 4 KiB).
inline constexpr int64_t kDirectAlignment = kNvmeAlignment;

class AlignedBuffer {
 public:
  // `bytes` of uninitialised memory at a kDirectAlignment boundary.
  // REQUIRES: bytes >= 0. Throws UserError when the host has no memory for it.
  explicit AlignedBuffer(int64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&&) = delete;

  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

class DirectFile {
 public:
  // Opens `path` for reading and writing, created (empty) when missing and
  // emptied when `truncate`; with O_DIRECT where the filesystem takes it,
  // buffered when it does not or `try_direct` is false. Throws UserError
  // naming the path and the system's reason (a missing directory, no
  // permission).
  DirectFile(std::string path, bool truncate, bool try_direct = true);
  ~DirectFile();  // closes; the file stays
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;

  const std::string& path() const { return path_; }
  // False when the filesystem refused O_DIRECT and the file is buffered.
  bool direct() const { return direct_; }

  // Reserves `bytes` on the disk (posix_fallocate; reads of reserved space
  // return zeros), so a disk too small fails here in one line instead of in
  // the middle of a step; then checks that the filesystem takes O_DIRECT
  // transfers, reopening the file buffered where it does not.
  // REQUIRES: no transfer in flight. Throws UserError (ENOSPC: says how much
  // was asked and how much is free).
  void Allocate(int64_t bytes);

  // Reads / writes exactly `bytes` at `offset`, retrying short transfers.
  // Safe from several threads at once (pread/pwrite carry their offset).
  // REQUIRES: offset, bytes and buffer aligned to kDirectAlignment; reads
  // within the file's size. Throws UserError on an I/O error or end of file.
  void ReadAt(int64_t offset, void* buffer, int64_t bytes) const;
  void WriteAt(int64_t offset, const void* buffer, int64_t bytes) const;
  // Waits until written data is on the disk (fdatasync).
  void Sync() const;

 private:
  void Open(bool direct, bool truncate);

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
};

// Bytes free for an unprivileged user on the filesystem holding `dir`
// (statvfs); -1 when it cannot be asked.
int64_t FreeDiskBytes(const std::string& dir);

}  // namespace llmplan::executor
