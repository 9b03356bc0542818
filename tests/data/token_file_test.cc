// TokenFile: every format read correctly, and every malformed file a one-line
// UserError that names the file. Files are written byte by byte here, as the
// tools that produce them (nanoGPT, llm.c, Megatron) lay them out.
#include "data/token_file.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/user_error.h"

namespace llmplan::data {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "llmplan_token_file_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const void* data, size_t bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    return path;
  }
  template <typename T>
  std::string WriteVector(const std::string& name, const std::vector<T>& v) {
    return Write(name, v.data(), v.size() * sizeof(T));
  }
  // llm.c layout: 256 int32 header, then tokens.
  template <typename T>
  std::string WriteLlmc(const std::string& name, int32_t magic, int32_t version, int32_t count,
                        const std::vector<T>& tokens) {
    std::vector<char> bytes(kLlmcHeaderBytes + tokens.size() * sizeof(T), 0);
    int32_t header[3] = {magic, version, count};
    std::memcpy(bytes.data(), header, sizeof(header));
    std::memcpy(bytes.data() + kLlmcHeaderBytes, tokens.data(), tokens.size() * sizeof(T));
    return Write(name, bytes.data(), bytes.size());
  }

  // The message of the UserError `f` throws (fails the test if none).
  template <typename F>
  std::string ErrorOf(F f) {
    try {
      f();
    } catch (const UserError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
      return message;
    }
    ADD_FAILURE() << "expected a UserError";
    return "";
  }

  std::filesystem::path dir_;
};

TEST_F(TokenFileTest, RawUint16ByDefaultAndForBin) {
  const std::vector<uint16_t> tokens = {0, 1, 65535, 300, 7};
  for (const std::string name : {"a.u16", "a.bin", "a.tokens"}) {
    TokenFile file(WriteVector(name, tokens));
    EXPECT_EQ(file.format(), TokenFileFormat::kRawU16) << name;
    ASSERT_EQ(file.size(), 5);
    EXPECT_EQ(file.token_bytes(), 2);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(file.Token(i), tokens[i]);
    std::vector<int64_t> out(3);
    EXPECT_EQ(file.Read(1, 3, out.data()), 65535u);
    EXPECT_EQ(out, (std::vector<int64_t>{1, 65535, 300}));
    EXPECT_EQ(file.ByteOffset(3), 6);
  }
}

TEST_F(TokenFileTest, RawUint32ByExtensionOrCaller) {
  const std::vector<uint32_t> tokens = {128000, 5, 128255, 70000};
  TokenFile by_extension(WriteVector("a.u32", tokens));
  EXPECT_EQ(by_extension.format(), TokenFileFormat::kRawU32);
  ASSERT_EQ(by_extension.size(), 4);
  EXPECT_EQ(by_extension.Token(2), 128255u);

  TokenFile by_caller(WriteVector("b.bin", tokens), TokenFileFormat::kRawU32);
  ASSERT_EQ(by_caller.size(), 4);
  std::vector<int64_t> out(4);
  EXPECT_EQ(by_caller.Read(0, 4, out.data()), 128255u);
  EXPECT_EQ(out, (std::vector<int64_t>{128000, 5, 128255, 70000}));
}

TEST_F(TokenFileTest, LlmcUint16Header) {
  const std::vector<uint16_t> tokens = {50256, 10, 20, 30};
  TokenFile file(WriteLlmc("train.bin", kLlmcMagicU16, 1, 4, tokens));
  EXPECT_EQ(file.format(), TokenFileFormat::kLlmc);
  ASSERT_EQ(file.size(), 4);
  EXPECT_EQ(file.token_bytes(), 2);
  EXPECT_EQ(file.Token(0), 50256u);
  EXPECT_EQ(file.Token(3), 30u);
  EXPECT_EQ(file.ByteOffset(1), kLlmcHeaderBytes + 2);
}

TEST_F(TokenFileTest, LlmcUint32HeaderLlama3) {
  const std::vector<uint32_t> tokens = {128000, 9906, 128001};
  TokenFile file(WriteLlmc("llama.bin", kLlmcMagicU32, 7, 3, tokens), TokenFileFormat::kLlmc);
  EXPECT_EQ(file.token_bytes(), 4);
  ASSERT_EQ(file.size(), 3);
  EXPECT_EQ(file.Token(0), 128000u);
  EXPECT_EQ(file.Token(2), 128001u);
}

TEST_F(TokenFileTest, MegatronIndexedDataset) {
  // Two documents of 3 and 2 uint16 tokens.
  const std::vector<uint16_t> tokens = {1, 2, 3, 4, 5};
  WriteVector("corpus_text_document.bin", tokens);
  std::vector<char> idx;
  auto put = [&](const void* p, size_t n) { idx.insert(idx.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n); };
  put("MMIDIDX\0\0", 9);
  const uint64_t version = 1, sequences = 2, documents = 3;
  const uint8_t dtype = 8;
  put(&version, 8);
  put(&dtype, 1);
  put(&sequences, 8);
  put(&documents, 8);
  const int32_t lengths[2] = {3, 2};
  const int64_t pointers[2] = {0, 6};
  const int64_t doc_idx[3] = {0, 1, 2};
  put(lengths, sizeof(lengths));
  put(pointers, sizeof(pointers));
  put(doc_idx, sizeof(doc_idx));
  Write("corpus_text_document.idx", idx.data(), idx.size());

  for (const std::string suffix : {"", ".bin", ".idx"}) {
    TokenFile file((dir_ / ("corpus_text_document" + suffix)).string());
    EXPECT_EQ(file.format(), TokenFileFormat::kMegatron) << suffix;
    ASSERT_EQ(file.size(), 5);
    EXPECT_EQ(file.Token(4), 5u);
  }
  // A .bin that does not match its index.
  WriteVector("corpus_text_document.bin", std::vector<uint16_t>{1, 2, 3, 4});
  EXPECT_NE(ErrorOf([&] { TokenFile f((dir_ / "corpus_text_document").string()); }).find("truncated"),
            std::string::npos);
}

TEST_F(TokenFileTest, MegatronSequenceCountBeyondItsIndexIsRefusedBeforeAllocating) {
  // A 16 GB .bin (sparse: no disk used) allows a count of 4e9 sequences by
  // its size alone; the index, 34 bytes of header and one length, holds one.
  // Believing the count would allocate 16 GB of lengths.
  const std::string bin = (dir_ / "big.bin").string();
  std::ofstream(bin, std::ios::binary).put('\0');
  std::filesystem::resize_file(bin, int64_t{16} << 30);
  std::vector<char> idx;
  auto put = [&](const void* p, size_t n) { idx.insert(idx.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n); };
  put("MMIDIDX\0\0", 9);
  const uint64_t version = 1, sequences = 4'000'000'000, documents = 2;
  const uint8_t dtype = 8;
  put(&version, 8);
  put(&dtype, 1);
  put(&sequences, 8);
  put(&documents, 8);
  const int32_t length = 3;
  put(&length, 4);
  Write("big.idx", idx.data(), idx.size());
  const std::string message = ErrorOf([&] { TokenFile f(bin, TokenFileFormat::kMegatron); });
  EXPECT_NE(message.find("big.idx: truncated sequence lengths"), std::string::npos) << message;
}

TEST_F(TokenFileTest, EmptyFileIsAClearError) {
  const std::string path = Write("empty.bin", "", 0);
  const std::string message = ErrorOf([&] { TokenFile f(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("empty"), std::string::npos) << message;
}

TEST_F(TokenFileTest, MissingFileIsAClearError) {
  const std::string path = (dir_ / "nope.bin").string();
  const std::string message = ErrorOf([&] { TokenFile f(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("llmplan data prepare"), std::string::npos) << message;
}

TEST_F(TokenFileTest, RawSizeNotAMultipleOfTheWidth) {
  const char bytes[5] = {1, 0, 2, 0, 3};
  const std::string path = Write("odd.u16", bytes, 5);
  const std::string message = ErrorOf([&] { TokenFile f(path); });
  EXPECT_NE(message.find("not a multiple of 2"), std::string::npos) << message;
  const std::string path32 = Write("odd.u32", bytes, 5);
  EXPECT_NE(ErrorOf([&] { TokenFile f(path32); }).find("not a multiple of 4"), std::string::npos);
}

TEST_F(TokenFileTest, LlmcShorterThanItsHeaderSays) {
  const std::string path = WriteLlmc("short.bin", kLlmcMagicU16, 1, 10, std::vector<uint16_t>{1, 2, 3});
  const std::string message = ErrorOf([&] { TokenFile f(path); });
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find("10 tokens"), std::string::npos) << message;
}

TEST_F(TokenFileTest, LlmcHeaderCutShort) {
  std::vector<int32_t> header(10, 0);
  header[0] = kLlmcMagicU16;
  header[1] = 1;
  const std::string path = WriteVector("cut.bin", header);
  EXPECT_NE(ErrorOf([&] { TokenFile f(path); }).find("header"), std::string::npos);
}

TEST_F(TokenFileTest, LlmcBadVersionAndZeroCount) {
  const std::string bad_version = WriteLlmc("v.bin", kLlmcMagicU16, 3, 2, std::vector<uint16_t>{1, 2});
  EXPECT_NE(ErrorOf([&] { TokenFile f(bad_version); }).find("version 3"), std::string::npos);
  const std::string zero = WriteLlmc("z.bin", kLlmcMagicU16, 1, 0, std::vector<uint16_t>{});
  EXPECT_NE(ErrorOf([&] { TokenFile f(zero); }).find("empty"), std::string::npos);
  const std::string extra = WriteLlmc("x.bin", kLlmcMagicU16, 1, 1, std::vector<uint16_t>{1, 2});
  EXPECT_NE(ErrorOf([&] { TokenFile f(extra); }).find("after the 1 tokens"), std::string::npos);
}

TEST_F(TokenFileTest, LlmcHeaderWithADamagedMagicIsRefusedNotReadAsRawTokens) {
  // One flipped bit in the magic: version and count still describe the file.
  const std::vector<uint16_t> tokens(100, 7);
  const std::string u16 = WriteLlmc("damaged.bin", kLlmcMagicU16 ^ 1, 1, 100, tokens);
  std::string message = ErrorOf([&] { TokenFile f(u16); });
  EXPECT_NE(message.find("looks like an llm.c token file (version 1, 100 tokens, as its size says) but its magic is "
                         "20240521, not 20240520: the header is damaged"),
            std::string::npos)
      << message;
  const std::string u32 = WriteLlmc("damaged32.bin", 0, 7, 3, std::vector<uint32_t>{1, 2, 3});
  EXPECT_NE(ErrorOf([&] { TokenFile f(u32); }).find("not 20240801"), std::string::npos);
  // The count damaged too, but the rest of the header is llm.c's zeros.
  const std::string both = WriteLlmc("both.bin", 12345, 1, 999, tokens);
  EXPECT_NE(ErrorOf([&] { TokenFile f(both); }).find("a zero-filled header"), std::string::npos);
  // Asked for raw tokens, the user gets raw tokens.
  TokenFile raw(u16, TokenFileFormat::kRawU16);
  EXPECT_EQ(raw.size(), (kLlmcHeaderBytes + 200) / 2);
  // Raw tokens that merely start with a 1 or a 7 in the second int32 are raw.
  std::vector<uint16_t> plain(2000, 5);
  plain[2] = 1;
  plain[3] = 0;
  EXPECT_EQ(TokenFile(WriteVector("plain.bin", plain)).format(), TokenFileFormat::kRawU16);
}

TEST_F(TokenFileTest, FileTruncatedWhileOpenIsAnErrorNotSigbus) {
  // With the file mmapped, reading past the new end was SIGBUS (the run died
  // without a word); with pread it is a short read, reported as such.
  std::vector<uint16_t> tokens(1 << 20);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 1000);
  const std::string path = WriteVector("shrinks.u16", tokens);
  TokenFile file(path);
  std::vector<int64_t> out(4097);
  EXPECT_EQ(file.Read(900'000, 4097, out.data()), 999u);
  std::filesystem::resize_file(path, 1000);
  const std::string message = ErrorOf([&] { file.Read(900'000, 4097, out.data()); });
  EXPECT_NE(message.find(path + ": the token file shrank from 2097152 to 1000 bytes while training read it"),
            std::string::npos)
      << message;
  EXPECT_NE(ErrorOf([&] { file.FindTokenAtLeast(2000, file.size(), 4); }).find("shrank"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { file.Token(600); }).find("shrank"), std::string::npos);
  EXPECT_EQ(file.Token(499), 499u) << "what is still there reads";
}

TEST_F(TokenFileTest, FifoAndDeviceAreRefusedWithoutBlocking) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(ErrorOf([&] { TokenFile f(fifo); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { TokenFile f("/dev/zero"); }).find("not a regular file"), std::string::npos);
}

TEST_F(TokenFileTest, FormatNames) {
  EXPECT_EQ(ParseTokenFileFormat("u16"), TokenFileFormat::kRawU16);
  EXPECT_EQ(ParseTokenFileFormat("megatron"), TokenFileFormat::kMegatron);
  EXPECT_EQ(TokenFileFormatName(ParseTokenFileFormat("llmc")), "llmc");
  EXPECT_THROW(ParseTokenFileFormat("int16"), UserError);
}

}  // namespace
}  // namespace llmplan::data
