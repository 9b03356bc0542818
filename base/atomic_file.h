// AtomicFile: a file written through a temporary beside it, fsync-ed and
// renamed over its name only when complete, so a reader (or a crash mid-write)
// sees the old file or the new one, never a torn one. Every file llmplan
// writes goes through it: plans, traces, reports, profiles, run summaries,
// checkpoint shards, token files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace llmplan {

class AtomicFile {
 public:
  // Creates the temporary "<path>.tmp.<pid>" in path's directory (same file
  // system, so the rename is one step). `what` names the file for the user
  // ("plan", "checkpoint shard"). Throws UserError when it cannot be created
  // (missing or unwritable directory).
  AtomicFile(std::string path, std::string what);
  // Removes the temporary unless Commit() succeeded: a failed write leaves
  // whatever was at `path` before untouched.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends `bytes` bytes. Throws UserError naming the file and errno's
  // reason (ENOSPC: "No space left on device").
  void Write(const void* data, size_t bytes);
  void Write(const std::string& text) { Write(text.data(), text.size()); }
  // Overwrites bytes already written at `offset` (a header whose contents are
  // known only at the end). REQUIRES: offset + bytes <= bytes_written().
  void WriteAt(uint64_t offset, const void* data, size_t bytes);
  uint64_t bytes_written() const { return written_; }

  // fsync (without it a crash can leave the new name pointing at an empty
  // file on some file systems), close, rename over `path`. Throws UserError
  // when any of them fails; the temporary is removed then.
  void Commit();

  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void Fail(const std::string& doing, int error);

  std::string path_, what_, temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// The whole of `contents` written to `path` through an AtomicFile.
// Throws UserError as AtomicFile does.
void WriteFileAtomically(const std::string& path, const std::string& contents, const std::string& what);

}  // namespace llmplan
