// MeasureDisk: sequential write and read bandwidth of the SSD holding a
// directory, the way NVMe offload uses it (executor/optimizer/
// nvme_optimizer_state.h): one file written, flushed and read back in
// NvmeBlockBytes blocks through DirectFile (O_DIRECT, so the page cache
// neither absorbs the writes nor serves the reads) — the profile's
// nvme_write_bytes_per_s and nvme_read_bytes_per_s. No LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "executor/profile/profile_measurements.h"

namespace llmplan::executor {

// Writes `bytes` (rounded up to whole blocks) of non-repeating data to a
// scratch file in `dir` (unlinked at once, so an interrupted measurement
// leaves nothing behind), flushes it (the write time includes the flush),
// then reads it all back. `progress(done, total)` after each block.
// REQUIRES: bytes >= 1. Throws UserError when `dir` is missing, unwritable or
// lacks the space (checked before writing).
DiskMeasurement MeasureDisk(const std::string& dir, int64_t bytes, const std::function<void(int, int)>& progress);

}  // namespace llmplan::executor
