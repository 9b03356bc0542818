// libFuzzer target: token files (--data), opened with every TokenFileFormat.
// TokenFile reads files, so the input is written to a scratch directory
//   data.bin   the payload (raw uint16, llm.c, or garbage)
//   data.u32   the same bytes (auto-detection reads *.u32 as uint32)
//   mega.idx   the payload's first L bytes, a Megatron index
//   mega.bin   the rest, its tokens
// where the input is [u16 L][u16 limit][payload]. Each file that opens is
// read whole, token by token and in one Read, and scanned with
// FindTokenAtLeast(limit) on one and two threads; the answers must agree with
// each other and with the file's size. Any bytes: those answers, or a
// UserError, nothing else.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "data/token_file.h"

namespace {

namespace fs = std::filesystem;
using llmplan::data::TokenFile;
using llmplan::data::TokenFileFormat;

// One scratch directory per process, in memory when /dev/shm exists;
// removed when the fuzzer exits normally.
struct Scratch {
  Scratch() {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir = base / ("llmplan_fuzz_token_file_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path dir;
};
const fs::path& ScratchDir() {
  static const Scratch scratch;
  return scratch.dir;
}

void WriteFile(const fs::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) __builtin_trap();  // the harness itself failed: not the parser's fault, but never silent
}

// The first index in [0, end) of `tokens` whose id is >= limit, or -1.
int64_t FirstAtLeast(const std::vector<int64_t>& tokens, int64_t end, uint32_t limit) {
  for (int64_t i = 0; i < end; ++i)
    if (tokens[static_cast<size_t>(i)] >= static_cast<int64_t>(limit)) return i;
  return -1;
}

void Exercise(const fs::path& path, TokenFileFormat format, uint32_t limit) {
  try {
    TokenFile file(path.string(), format);
    const int64_t n = file.size();
    if (n <= 0 || (file.token_bytes() != 2 && file.token_bytes() != 4)) __builtin_trap();
    if (file.format() == TokenFileFormat::kAuto) __builtin_trap();
    if (file.ByteOffset(n) > static_cast<int64_t>(fs::file_size(file.path()))) __builtin_trap();
    // Inputs are small (libFuzzer's -max_len), so reading everything is cheap.
    std::vector<int64_t> tokens(static_cast<size_t>(n));
    const uint32_t max_id = file.Read(0, n, tokens.data());
    if (static_cast<int64_t>(max_id) != *std::max_element(tokens.begin(), tokens.end())) __builtin_trap();
    const uint32_t width_max = file.token_bytes() == 2 ? 0xFFFFu : 0xFFFFFFFFu;
    for (int64_t i = 0; i < n; ++i) {
      if (tokens[static_cast<size_t>(i)] < 0 || tokens[static_cast<size_t>(i)] > width_max) __builtin_trap();
      if (file.Token(i) != static_cast<uint32_t>(tokens[static_cast<size_t>(i)])) __builtin_trap();
    }
    if (n > 1) {
      int64_t tail[1] = {-1};
      file.Read(n - 1, 1, tail);
      if (tail[0] != tokens.back()) __builtin_trap();
    }
    for (const int64_t end : {n, n / 2}) {
      const int64_t expected = FirstAtLeast(tokens, end, limit);
      if (file.FindTokenAtLeast(limit, end, 1) != expected) __builtin_trap();
      if (file.FindTokenAtLeast(limit, end, 2) != expected) __builtin_trap();
    }
  } catch (const llmplan::UserError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint16_t idx_bytes = 0, limit = 0;
  std::memcpy(&idx_bytes, data, 2);
  std::memcpy(&limit, data + 2, 2);
  const uint8_t* payload = data + 4;
  const size_t payload_size = size - 4;
  const size_t split = std::min<size_t>(idx_bytes, payload_size);

  const fs::path& dir = ScratchDir();
  WriteFile(dir / "data.bin", payload, payload_size);
  WriteFile(dir / "data.u32", payload, payload_size);
  WriteFile(dir / "mega.idx", payload, split);
  WriteFile(dir / "mega.bin", payload + split, payload_size - split);

  for (const TokenFileFormat format : {TokenFileFormat::kAuto, TokenFileFormat::kRawU16, TokenFileFormat::kRawU32,
                                       TokenFileFormat::kLlmc, TokenFileFormat::kMegatron}) {
    Exercise(dir / "data.bin", format, limit);
    Exercise(dir / "mega.bin", format, limit);
  }
  Exercise(dir / "data.u32", TokenFileFormat::kAuto, limit);
  Exercise(dir / "mega.idx", TokenFileFormat::kMegatron, limit);
  Exercise(dir / "mega", TokenFileFormat::kMegatron, limit);
  return 0;
}
