// Document index files (data/document_index.h): the bytes the writer lays
// down, the lookups over them, and a one-line UserError for every bad file.
#include "data/document_index.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/user_error.h"

namespace llmplan::data {
namespace {

class DocumentIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "llmplan_document_index_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = (dir_ / "tokens.bin.docs").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::vector<int64_t>& starts, int64_t tokens) {
    DocumentIndexWriter writer(path_);
    for (int64_t start : starts) writer.StartDocument(start);
    EXPECT_EQ(writer.documents(), static_cast<int64_t>(starts.size()));
    writer.Commit(tokens);
  }
  std::string Bytes() {
    std::ifstream in(path_, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void SetBytes(const std::string& bytes) { std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes; }
  // The good file's bytes with the int64 at `offset` replaced by `value`.
  void SetInt64(int64_t offset, int64_t value) {
    std::string bytes = good_;
    std::memcpy(bytes.data() + offset, &value, 8);
    SetBytes(bytes);
  }
  // The message of the UserError that opening the index throws ("" if none).
  std::string OpenError(int64_t expected_tokens) {
    try {
      DocumentIndex index(path_, expected_tokens);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }
  // Expects opening for `expected_tokens` to fail with one line that names
  // the file, says what is wrong (`message`) and how to fix it.
  void ExpectError(int64_t expected_tokens, const std::string& message) {
    const std::string error = OpenError(expected_tokens);
    EXPECT_NE(error.find(path_ + ": " + message), std::string::npos) << error;
    EXPECT_NE(error.find("re-create it with `llmplan data prepare`"), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }

  std::filesystem::path dir_;
  std::string path_;
  std::string good_;  // the bytes of kStarts over kTokens, for the corruption tests
};

const std::vector<int64_t> kStarts = {0, 3, 4, 10};
constexpr int64_t kTokens = 16;

TEST_F(DocumentIndexTest, PathIsTheTokenFileWithSuffix) {
  EXPECT_EQ(DocumentIndexPathFor("out/train.bin"), "out/train.bin.docs");
}

TEST_F(DocumentIndexTest, WriterLaysDownHeaderAndStarts) {
  Write(kStarts, kTokens);
  const std::string bytes = Bytes();
  ASSERT_EQ(bytes.size(), 32u + 8u * 4);
  EXPECT_EQ(bytes.substr(0, 8), "LLMPDOCS");
  uint32_t version = 0, reserved = 7;
  int64_t tokens = 0, documents = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&reserved, bytes.data() + 12, 4);
  std::memcpy(&tokens, bytes.data() + 16, 8);
  std::memcpy(&documents, bytes.data() + 24, 8);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(reserved, 0u);
  EXPECT_EQ(tokens, kTokens);
  EXPECT_EQ(documents, 4);
  std::vector<int64_t> starts(4);
  std::memcpy(starts.data(), bytes.data() + 32, 32);
  EXPECT_EQ(starts, kStarts);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp." + std::to_string(::getpid())));
}

TEST_F(DocumentIndexTest, RoundTripAndLengths) {
  Write(kStarts, kTokens);
  const DocumentIndex index(path_, kTokens);
  EXPECT_EQ(index.path(), path_);
  EXPECT_EQ(index.tokens(), kTokens);
  EXPECT_EQ(index.documents(), 4);
  EXPECT_EQ(index.starts(), kStarts);
  EXPECT_EQ(index.Length(0), 3);
  EXPECT_EQ(index.Length(1), 1);
  EXPECT_EQ(index.Length(2), 6);
  EXPECT_EQ(index.Length(3), 6);  // the last one ends at the token count
}

TEST_F(DocumentIndexTest, OneDocumentOfOneToken) {
  Write({0}, 1);
  const DocumentIndex index(path_, 1);
  EXPECT_EQ(index.documents(), 1);
  EXPECT_EQ(index.Length(0), 1);
  uint8_t mark = 7;
  index.MarkStarts(0, 1, &mark);
  EXPECT_EQ(mark, 1);
}

TEST_F(DocumentIndexTest, MarkStartsOverEveryRange) {
  Write(kStarts, kTokens);
  const DocumentIndex index(path_, kTokens);
  std::vector<uint8_t> expected(kTokens, 0);
  for (int64_t start : kStarts) expected[static_cast<size_t>(start)] = 1;
  // Every range: from 0, ending at the last token, within one document and
  // across several boundaries.
  for (int64_t begin = 0; begin <= kTokens; ++begin) {
    for (int64_t count = 0; begin + count <= kTokens; ++count) {
      std::vector<uint8_t> out(static_cast<size_t>(count) + 1, 7);
      index.MarkStarts(begin, count, out.data());
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[static_cast<size_t>(i)], expected[static_cast<size_t>(begin + i)]) << begin << "+" << i;
      }
      EXPECT_EQ(out[static_cast<size_t>(count)], 7);  // nothing written past count
    }
  }
  std::vector<uint8_t> tail(6, 7);
  index.MarkStarts(10, 6, tail.data());  // the last document, to the end
  EXPECT_EQ(tail, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0}));
  std::vector<uint8_t> across(5, 7);
  index.MarkStarts(2, 5, across.data());  // tokens 2..6: starts at 3 and 4
  EXPECT_EQ(across, (std::vector<uint8_t>{0, 1, 1, 0, 0}));
}

TEST_F(DocumentIndexTest, CountLongerThan) {
  Write(kStarts, kTokens);  // lengths 3, 1, 6, 6
  const DocumentIndex index(path_, kTokens);
  EXPECT_EQ(index.CountLongerThan(0), 4);
  EXPECT_EQ(index.CountLongerThan(1), 3);
  EXPECT_EQ(index.CountLongerThan(3), 2);
  EXPECT_EQ(index.CountLongerThan(5), 2);
  EXPECT_EQ(index.CountLongerThan(6), 0);
  EXPECT_EQ(index.CountLongerThan(1000), 0);
}

TEST_F(DocumentIndexTest, UncommittedWriterKeepsTheOldFile) {
  Write(kStarts, kTokens);
  const std::string old = Bytes();
  {
    DocumentIndexWriter writer(path_);
    writer.StartDocument(0);
    writer.StartDocument(1);
  }
  EXPECT_EQ(Bytes(), old);
  EXPECT_EQ(DocumentIndex(path_, kTokens).starts(), kStarts);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
}

TEST_F(DocumentIndexTest, UncommittedWriterLeavesNothing) {
  {
    DocumentIndexWriter writer(path_);
    writer.StartDocument(0);
  }
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(DocumentIndexTest, MissingFileAndNotARegularFile) {
  ExpectError(kTokens, "cannot open document index");
  path_ = dir_.string();
  ExpectError(kTokens, "not a regular file");
}

class CorruptDocumentIndexTest : public DocumentIndexTest {
 protected:
  void SetUp() override {
    DocumentIndexTest::SetUp();
    Write(kStarts, kTokens);
    good_ = Bytes();
    ASSERT_EQ(OpenError(kTokens), "");
  }
};

TEST_F(CorruptDocumentIndexTest, TruncatedHeader) {
  SetBytes(good_.substr(0, 20));
  ExpectError(kTokens, "20 bytes is shorter than the 32-byte header: the file is truncated");
}

TEST_F(CorruptDocumentIndexTest, BadMagic) {
  std::string bytes = good_;
  bytes[4] = 'X';
  SetBytes(bytes);
  ExpectError(kTokens, "not an llmplan document index (no LLMPDOCS magic)");
}

TEST_F(CorruptDocumentIndexTest, OtherVersion) {
  std::string bytes = good_;
  bytes[8] = 2;
  SetBytes(bytes);
  ExpectError(kTokens, "document index format version 2, this llmplan reads version 1");
}

TEST_F(CorruptDocumentIndexTest, ReservedNotZero) {
  std::string bytes = good_;
  bytes[13] = 1;
  SetBytes(bytes);
  ExpectError(kTokens, "bytes 12..15 of the header are 256, not 0");
}

TEST_F(CorruptDocumentIndexTest, TokenCountDiffersFromTheTokenFile) {
  ExpectError(kTokens + 1, "indexes 16 tokens but the token file beside it holds 17: the index belongs to another "
                           "token file");
}

TEST_F(CorruptDocumentIndexTest, NoDocuments) {
  SetInt64(24, 0);
  ExpectError(kTokens, "its header counts 0 documents, not at least 1");
  SetInt64(24, -3);
  ExpectError(kTokens, "its header counts -3 documents, not at least 1");
}

TEST_F(CorruptDocumentIndexTest, SizeOtherThanTheCountsSay) {
  SetBytes(good_.substr(0, good_.size() - 8));
  ExpectError(kTokens, "56 bytes, but 4 documents take 64: the file is truncated");
  SetBytes(good_.substr(0, good_.size() - 3));
  ExpectError(kTokens, "61 bytes, but 4 documents take 64: the file is truncated");
  SetBytes(good_ + "x");
  ExpectError(kTokens, "65 bytes, but 4 documents take 64");
  SetBytes(good_ + std::string(8, '\0'));
  ExpectError(kTokens, "72 bytes, but 4 documents take 64");
  SetInt64(24, INT64_MAX);  // 8 * the count overflows
  ExpectError(kTokens, "64 bytes, but 9223372036854775807 documents take more: the file is truncated");
}

TEST_F(CorruptDocumentIndexTest, FirstStartNotZero) {
  SetInt64(32, 1);
  ExpectError(kTokens, "the first document starts at token 1, not 0");
}

TEST_F(CorruptDocumentIndexTest, StartsNotStrictlyAscending) {
  SetInt64(32 + 2 * 8, 3);  // document 2 at document 1's start
  ExpectError(kTokens, "document 2 starts at token 3, not after document 1 (3)");
  SetInt64(32 + 2 * 8, 2);
  ExpectError(kTokens, "document 2 starts at token 2, not after document 1 (3)");
}

TEST_F(CorruptDocumentIndexTest, StartAtOrPastTheTokenCount) {
  SetInt64(32 + 3 * 8, kTokens);
  ExpectError(kTokens, "document 3 starts at token 16, past the last of the 16 tokens");
  SetInt64(32 + 3 * 8, 1000);
  ExpectError(kTokens, "document 3 starts at token 1000, past the last of the 16 tokens");
}

}  // namespace
}  // namespace llmplan::data
