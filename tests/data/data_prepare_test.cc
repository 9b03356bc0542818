// `llmplan data prepare` through the built binary: the byte-level tokens and
// the header it writes, and one-line errors with exit status 2.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cli_runner.h"

#include "data/token_file.h"

namespace llmplan::data {
namespace {

using executor_test::CommandResult;
using executor_test::RunLlmplan;

class DataPrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "llmplan_data_prepare_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string WriteText(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::vector<int64_t> Tokens(const std::string& path, TokenFileFormat format = TokenFileFormat::kAuto) {
    TokenFile file(path, format);
    std::vector<int64_t> tokens(file.size());
    file.Read(0, file.size(), tokens.data());
    return tokens;
  }
  std::filesystem::path dir_;
};

TEST_F(DataPrepareTest, BytesThenEndOfTextPerFileInLlmcFormat) {
  const std::string a = WriteText("a.txt", "Hi\n");
  const std::string b = WriteText("b.txt", "\xffZ");
  const std::string out = (dir_ / "sub" / "tokens.bin").string();
  const CommandResult r = RunLlmplan("data prepare --out " + out + " " + a + " " + b);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 7 tokens (2 documents"), std::string::npos) << r.output;
  TokenFile file(out);
  EXPECT_EQ(file.format(), TokenFileFormat::kLlmc);  // header: magic 20240520, version 1, count
  EXPECT_EQ(Tokens(out), (std::vector<int64_t>{'H', 'i', '\n', 256, 0xff, 'Z', 256}));
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp." + std::to_string(::getpid())));
}

TEST_F(DataPrepareTest, InspectReportsFormatCountAndLargestId) {
  const std::string out = (dir_ / "tokens.bin").string();
  ASSERT_EQ(RunLlmplan("data prepare --out " + out + " " + WriteText("a.txt", "abc")).status, 0);
  const CommandResult r = RunLlmplan("data inspect " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("format llmc, 4 tokens of 2 bytes, largest id 256 (needs vocab >= 257)"), std::string::npos)
      << r.output;
  const CommandResult missing = RunLlmplan("data inspect " + (dir_ / "nope.bin").string());
  EXPECT_EQ(missing.status, 2) << missing.output;
}

TEST_F(DataPrepareTest, RawFormatAndSeparatorLines) {
  const std::string fortunes = WriteText("f", "one\n%\ntwo\r\n%\n%\nthree");
  const std::string out = (dir_ / "tokens.u16").string();
  const CommandResult r = RunLlmplan("data prepare --format raw-u16 --split-on-line % --out " + out + " " + fortunes);
  ASSERT_EQ(r.status, 0) << r.output;
  // Empty documents between consecutive separators are dropped.
  EXPECT_EQ(Tokens(out, TokenFileFormat::kRawU16),
            (std::vector<int64_t>{'o', 'n', 'e', '\n', 256, 't', 'w', 'o', '\r', '\n', 256, 't', 'h', 'r', 'e', 'e', 256}));
  EXPECT_EQ(std::filesystem::file_size(out), 17u * 2);
}

TEST_F(DataPrepareTest, MissingInputIsOneLineExitTwoAndKeepsTheOldOutput) {
  const std::string out = WriteText("tokens.bin", "previous contents");
  const std::string good = WriteText("good.txt", "text");
  const CommandResult r = RunLlmplan("data prepare --out " + out + " " + good + " " + (dir_ / "missing.txt").string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("missing.txt' not found"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  std::ifstream in(out);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "previous contents");
}

TEST_F(DataPrepareTest, EmptyInputsAndHelp) {
  const std::string empty = WriteText("empty.txt", "");
  const std::string out = (dir_ / "never.bin").string();
  const CommandResult r = RunLlmplan("data prepare --out " + out + " " + empty);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("no text"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  const CommandResult help = RunLlmplan("data prepare --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("256 = end of text"), std::string::npos) << help.output;
}

}  // namespace
}  // namespace llmplan::data
