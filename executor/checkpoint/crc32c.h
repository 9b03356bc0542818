// CRC-32C (Castagnoli), the checksum a checkpoint's manifest records for each
// file: the polynomial iSCSI, ext4 and RocksDB use, because x86 computes it
// in hardware (SSE4.2's crc32 instruction, ~10+ GB/s per core): checking a
// 32 GB checkpoint is then bounded by the disk, not the checksum. Machines
// without the instruction use a slicing-by-8 table (~1-2 GB/s).
//
// Values are those of the standard CRC-32C (initial value and final xor
// 0xFFFFFFFF): Crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace llmplan::checkpoint {

// Extends `crc` (a previous result, 0 for the empty prefix) with `size` bytes
// at `data`: Crc32c(a + b) == Crc32cExtend(Crc32c(a), b).
// REQUIRES: data non-null or size == 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }

// "crc32c:" followed by 8 lower-case hex digits: how manifests spell it.
std::string Crc32cText(uint32_t crc);

// CRC-32C of the whole file at `path` and its size in bytes (read in 4 MiB
// blocks). Throws UserError when the file cannot be read.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};
FileDigest DigestFile(const std::string& path);

}  // namespace llmplan::checkpoint
