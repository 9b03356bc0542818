#include "executor/profile/disk_rate.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/user_error.h"
#include "executor/hardware/direct_file.h"
#include "base/format.h"
#include "planner/nvme_offload.h"

namespace llmplan::executor {

DiskMeasurement MeasureDisk(const std::string& dir, int64_t bytes, const std::function<void(int, int)>& progress) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw UserError("--nvme-dir " + dir + " is not a directory");
  DiskMeasurement d;
  d.dir = dir;
  d.block_bytes = NvmeBlockBytes(kNvmeBlockElements);
  const int blocks = static_cast<int>(std::max<int64_t>(1, (bytes + d.block_bytes - 1) / d.block_bytes));
  d.bytes = blocks * d.block_bytes;
  const int64_t free = FreeDiskBytes(dir);
  if (free >= 0 && free < d.bytes)
    throw UserError("--nvme-dir " + dir + " has " + FormatBytes(static_cast<double>(free)) + " free; measuring it "
                    "writes " + FormatBytes(static_cast<double>(d.bytes)));
  char name[64];
  std::snprintf(name, sizeof name, "llmplan-disk-probe-pid%d.bin", static_cast<int>(::getpid()));
  const std::string path = (std::filesystem::path(dir) / name).string();
  DirectFile file(path, /*truncate=*/true);
  std::filesystem::remove(path, ec);  // the descriptor keeps it until the end
  d.direct = file.direct();

  // Data no controller can compress or deduplicate: a xorshift stream.
  AlignedBuffer buffer(d.block_bytes);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto* words = static_cast<uint64_t*>(buffer.data());
  for (int64_t i = 0; i < d.block_bytes / 8; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    words[i] = x;
  }
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  for (int b = 0; b < blocks; ++b) {
    words[0] = static_cast<uint64_t>(b);  // no two blocks alike
    file.WriteAt(b * d.block_bytes, buffer.data(), d.block_bytes);
    progress(b + 1, 2 * blocks);
  }
  file.Sync();
  d.write_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
  for (int b = 0; b < blocks; ++b) {
    file.ReadAt(b * d.block_bytes, buffer.data(), d.block_bytes);
    progress(blocks + b + 1, 2 * blocks);
  }
  d.read_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return d;
}

}  // namespace llmplan::executor
