// The safetensors header, parsed and validated without LibTorch: what a file
// says it holds, checked before a byte of tensor data is touched. Split from
// safetensors.h (the LibTorch reader and writer) so the parser of this
// outside input can be fuzzed on its own (tests/fuzz/fuzz_safetensors_header.cc).
//
//   8 bytes    little-endian u64 N, the header length
//   N bytes    UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [b, e]},
//              "__metadata__": {str: str}}, padded with spaces
//   data       the tensors, back to back; offsets are relative to its start
//
// What is refused (a UserError with one line naming the file): a header over
// 100 MB or past the end of the file, invalid JSON, duplicate keys, an
// unknown dtype, a shape that is not non-negative integers or whose byte
// size overflows, data_offsets that are not [begin <= end] inside the data
// section or do not match the shape's size, overlaps, gaps, undescribed
// bytes after the last tensor, unknown fields, a non-string metadata value.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace llmplan::checkpoint {

// Readers refuse headers larger than this (the reference implementation's
// limit): a hostile length must not make us allocate gigabytes.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor's header entry.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // as in the file: "BF16", "F32", ...
  std::vector<int64_t> shape;  // each dimension, and their product, fits int64
  uint64_t begin = 0;          // byte offsets into the data section, end exclusive
  uint64_t end = 0;
};

// Bytes per element of `dtype` as the file spells it (F64 F32 F16 BF16 I64
// I32 I16 I8 U8 BOOL U16 U32), or 0 for any other name.
int SafetensorsDtypeBytes(const std::string& dtype);

// Parses and validates a header. `header` is the N JSON bytes (trailing
// spaces allowed), `data_bytes` the size of the data section. Returns the
// entries sorted by begin offset — they tile [0, data_bytes) exactly, each
// spanning its dtype's size times its shape's product — and fills `metadata`
// when non-null. Throws UserError whose message starts with `what` (the
// file name).
std::vector<SafetensorsEntry> ParseSafetensorsHeader(const std::string& header, uint64_t data_bytes,
                                                     const std::string& what,
                                                     std::map<std::string, std::string>* metadata = nullptr);

// A whole file's layout: where the data section starts and its entries.
struct SafetensorsLayout {
  uint64_t data_offset = 0;  // 8 + N
  std::vector<SafetensorsEntry> entries;  // as ParseSafetensorsHeader returns them
};

// Reads the length prefix and the header of a file of `file_bytes` bytes at
// `file` (a mapping, or the bytes in memory) and validates them as above.
// REQUIRES: file points at file_bytes readable bytes. Throws UserError
// naming `what` for a file under 8 bytes, a header length over the limit or
// past the end, or any header problem.
SafetensorsLayout ParseSafetensorsFile(const unsigned char* file, uint64_t file_bytes, const std::string& what,
                                       std::map<std::string, std::string>* metadata = nullptr);

}  // namespace llmplan::checkpoint
