// Loss mask files (data/loss_mask.h): the bytes the writer lays down, reading
// them back at any offset, and a one-line UserError for every bad file.
#include "data/loss_mask.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/user_error.h"
#include "data/token_file_writer.h"

namespace llmplan::data {
namespace {

class LossMaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "llmplan_loss_mask_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = (dir_ / "tokens.bin.lossmask").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::vector<int>& bits) {
    LossMaskWriter writer(path_);
    for (int b : bits) writer.Add(b != 0);
    writer.Commit();
  }
  std::string Bytes() {
    std::ifstream in(path_, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void SetBytes(const std::string& bytes) { std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes; }
  // The message of the UserError that opening the mask throws ("" if none).
  std::string OpenError(int64_t expected_tokens) {
    try {
      LossMaskFile file(path_, expected_tokens);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
  std::string path_;
};

const std::vector<int> kBits = {1, 0, 0, 1, 1, 1, 0, 0, /**/ 0, 0, 0, 0, 0, 0, 0, 1, /**/ 1, 1, 0};

TEST_F(LossMaskTest, PathIsTheTokenFileWithSuffix) {
  EXPECT_EQ(LossMaskPathFor("out/train.bin"), "out/train.bin.lossmask");
}

TEST_F(LossMaskTest, TrainedShareIsTheMasksOnesOverItsTokensAndNoneWithoutAMask) {
  const std::string tokens = (dir_ / "tokens.bin").string();
  TokenFileWriter writer(tokens, /*llmc_header=*/true, /*token_bytes=*/2);
  for (size_t i = 0; i < kBits.size(); ++i) writer.Add(static_cast<uint32_t>(i));
  writer.Commit();
  EXPECT_FALSE(TrainedShareOf(tokens).has_value());
  Write(kBits);  // 7 of 19 trained
  ASSERT_TRUE(TrainedShareOf(tokens).has_value());
  EXPECT_DOUBLE_EQ(*TrainedShareOf(tokens), 7.0 / 19.0);
}

TEST_F(LossMaskTest, WriterLaysDownHeaderAndBitsLeastSignificantFirst) {
  Write(kBits);
  const std::string bytes = Bytes();
  ASSERT_EQ(bytes.size(), 24u + 3u);
  EXPECT_EQ(bytes.substr(0, 8), "LLMPMASK");
  uint32_t version = 0;
  int64_t count = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(count, 19);
  EXPECT_EQ(static_cast<uint8_t>(bytes[24]), 0b00111001);
  EXPECT_EQ(static_cast<uint8_t>(bytes[25]), 0b10000000);
  EXPECT_EQ(static_cast<uint8_t>(bytes[26]), 0b00000011);  // unused bits are 0
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp." + std::to_string(::getpid())));
}

TEST_F(LossMaskTest, RoundTripAtEveryOffset) {
  Write(kBits);
  const LossMaskFile file(path_, 19);
  EXPECT_EQ(file.size(), 19);
  EXPECT_EQ(file.trained(), 7);
  EXPECT_EQ(file.trained(), 7);  // remembered
  for (int64_t begin = 0; begin < 19; ++begin) {
    for (int64_t count = 0; begin + count <= 19; ++count) {
      std::vector<uint8_t> out(static_cast<size_t>(count) + 1, 7);
      file.Copy(begin, count, out.data());
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[static_cast<size_t>(i)], kBits[static_cast<size_t>(begin + i)]) << begin << "+" << i;
      }
      EXPECT_EQ(out[static_cast<size_t>(count)], 7);  // nothing written past count
    }
  }
}

TEST_F(LossMaskTest, WholeBytesAndLargeMasks) {
  std::vector<int> bits(3 * 1000 * 1000 + 8);
  int64_t ones = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    bits[i] = (i * 2654435761u) % 7 < 3;
    ones += bits[i];
  }
  Write(bits);
  const LossMaskFile file(path_, static_cast<int64_t>(bits.size()));
  EXPECT_EQ(file.trained(), ones);
  std::vector<uint8_t> out(4099);
  file.Copy(1234567, 4099, out.data());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], bits[1234567 + i]) << i;
}

TEST_F(LossMaskTest, UncommittedWriterLeavesNothing) {
  {
    LossMaskWriter writer(path_);
    writer.Add(true);
    EXPECT_FALSE(std::filesystem::exists(path_));
  }
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(LossMaskTest, MissingFile) {
  const std::string error = OpenError(19);
  EXPECT_NE(error.find(path_ + ": cannot open loss mask"), std::string::npos) << error;
  EXPECT_NE(error.find("llmplan data prepare --chat"), std::string::npos) << error;
}

TEST_F(LossMaskTest, TruncatedHeaderAndTruncatedBits) {
  Write(kBits);
  const std::string good = Bytes();
  SetBytes(good.substr(0, 10));
  EXPECT_NE(OpenError(19).find(path_ + ": 10 bytes is shorter than the 24-byte header: the file is truncated"),
            std::string::npos)
      << OpenError(19);
  SetBytes(good.substr(0, 26));
  EXPECT_NE(OpenError(19).find(path_ + ": 26 bytes, but 19 tokens take 27: the file is truncated"), std::string::npos)
      << OpenError(19);
  SetBytes(good + "x");
  EXPECT_NE(OpenError(19).find(path_ + ": 28 bytes, but 19 tokens take 27"), std::string::npos) << OpenError(19);
}

TEST_F(LossMaskTest, BadMagicAndVersion) {
  Write(kBits);
  std::string bytes = Bytes();
  bytes[0] = 'X';
  SetBytes(bytes);
  EXPECT_NE(OpenError(19).find(path_ + ": not an llmplan loss mask (no LLMPMASK magic)"), std::string::npos)
      << OpenError(19);
  bytes[0] = 'L';
  bytes[8] = 2;
  SetBytes(bytes);
  EXPECT_NE(OpenError(19).find(path_ + ": loss mask format version 2, this llmplan reads version 1"),
            std::string::npos)
      << OpenError(19);
}

TEST_F(LossMaskTest, CountDiffersFromTheTokenFile) {
  Write(kBits);
  const std::string error = OpenError(20);
  EXPECT_NE(error.find(path_ + ": masks 19 tokens but the token file beside it holds 20"), std::string::npos)
      << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
  EXPECT_EQ(OpenError(19), "");
}

TEST_F(LossMaskTest, HugeCountInADamagedHeader) {
  Write(kBits);
  std::string bytes = Bytes();
  const int64_t huge = INT64_MAX;
  std::memcpy(bytes.data() + 16, &huge, 8);
  SetBytes(bytes);
  EXPECT_NE(OpenError(19).find("the file is truncated"), std::string::npos) << OpenError(19);
}

}  // namespace
}  // namespace llmplan::data
