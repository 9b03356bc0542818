// `llmplan data prepare` through the built binary: the byte-level tokens and
// the header it writes, real tokenizers (ids from the reference
// implementations, tests/data/tokenizers), the order of tokens encoded on
// several threads, and one-line errors with exit status 2.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
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

const std::string kFixtures = LLMPLAN_TOKENIZER_FIXTURES;
const std::string kReferences = std::string(LLMPLAN_SOURCE_DIR) + "/tests/data/tokenizers/reference";

// Case `index` of the reference corpus and the ids the reference tokenizer gave it.
std::pair<std::string, std::vector<int64_t>> ReferenceCase(const std::string& tokenizer, size_t index) {
  std::ifstream in(kReferences + "/corpus.txt", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string separator = "\n__ggml_vocab_test__\n";
  size_t start = 0;
  for (size_t i = 0; i < index; ++i) start = text.find(separator, start) + separator.size();
  const std::string content = text.substr(start, text.find(separator, start) - start);
  std::ifstream ids_in(kReferences + "/corpus." + tokenizer + ".out");
  std::string line;
  for (size_t i = 0; i <= index; ++i) std::getline(ids_in, line);
  std::istringstream fields(line);
  std::vector<int64_t> ids;
  int64_t id;
  while (fields >> id) ids.push_back(id);
  return {content, ids};
}

TEST_F(DataPrepareTest, Llama3TokenizerWritesUint32WithEndOfTextAfterEachDocument) {
  const auto [text_a, ids_a] = ReferenceCase("llama3", 3);
  const auto [text_b, ids_b] = ReferenceCase("llama3", 104);  // Russian
  ASSERT_FALSE(ids_a.empty());
  ASSERT_FALSE(ids_b.empty());
  const std::string out = (dir_ / "llama3.bin").string();
  const CommandResult r = RunLlmplan("data prepare --tokenizer " + kFixtures + "/llama3/tokenizer.json --out " + out +
                                     " " + WriteText("a.txt", text_a) + " " + WriteText("b.txt", text_b));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(2 documents, Hugging Face BPE (byte-level), vocab 128256)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(llm.c uint32)"), std::string::npos) << r.output;
  TokenFile file(out);
  EXPECT_EQ(file.format(), TokenFileFormat::kLlmc);
  EXPECT_EQ(file.token_bytes(), 4);
  std::vector<int64_t> expected = ids_a;
  expected.push_back(128001);  // <|end_of_text|>
  expected.insert(expected.end(), ids_b.begin(), ids_b.end());
  expected.push_back(128001);
  EXPECT_EQ(Tokens(out), expected);
}

TEST_F(DataPrepareTest, SentencePieceModelWritesBosAndEosAroundEachDocument) {
  const auto [text, ids] = ReferenceCase("llama2", 100);  // German
  const std::string fortunes = WriteText("f.txt", text + "\n%\n" + text);
  const std::string out = (dir_ / "llama2.bin").string();
  const CommandResult r = RunLlmplan("data prepare --split-on-line % --tokenizer " + kFixtures +
                                     "/llama2/tokenizer.model --out " + out + " " + fortunes);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("SentencePiece BPE, vocab 32000"), std::string::npos) << r.output;
  EXPECT_EQ(TokenFile(out).token_bytes(), 2);
  const std::vector<int64_t> tokens = Tokens(out);
  ASSERT_GE(tokens.size(), 2 * ids.size() + 4);
  EXPECT_EQ(tokens.front(), 1);  // <s>
  EXPECT_EQ(tokens.back(), 2);   // </s>
  // The second document is exactly the reference ids between <s> and </s>
  // (the first one also holds the newline before the separator line).
  std::vector<int64_t> second(tokens.end() - static_cast<ptrdiff_t>(ids.size()) - 2, tokens.end());
  std::vector<int64_t> expected = {1};
  expected.insert(expected.end(), ids.begin(), ids.end());
  expected.push_back(2);
  EXPECT_EQ(second, expected);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), 1), 2);
}

TEST_F(DataPrepareTest, ThreadsKeepInputOrderAndBigDocumentsSplitAtLineStarts) {
  // Text (the reference corpus: fortunes, many lines starting with a letter)
  // past the 8 MiB at which one document is split, and in many jobs.
  std::ifstream in(kReferences + "/corpus.txt", std::ios::binary);
  const std::string fortunes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(fortunes.size(), 20000u);
  std::string big;
  while (big.size() < (size_t{9} << 20)) big += fortunes;
  const std::string big_path = WriteText("big.txt", big);
  const std::string one = (dir_ / "one.bin").string(), two = (dir_ / "two.bin").string();
  ASSERT_EQ(RunLlmplan("data prepare --threads 1 --out " + one + " " + big_path).status, 0);
  const CommandResult r = RunLlmplan("data prepare --threads 2 --out " + two + " " + big_path);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<int64_t> tokens = Tokens(two);
  ASSERT_EQ(tokens.size(), big.size() + 1);
  EXPECT_TRUE(std::equal(big.begin(), big.end(), tokens.begin(),
                         [](char c, int64_t t) { return static_cast<unsigned char>(c) == t; }));
  EXPECT_EQ(tokens.back(), 256);
  EXPECT_EQ(Tokens(one), tokens);

  // A real tokenizer over several jobs: the same ids with one thread or two.
  const std::string part = WriteText("part.txt", big.substr(0, size_t{3} << 20));
  const std::string g1 = (dir_ / "g1.bin").string(), g2 = (dir_ / "g2.bin").string();
  const std::string gpt2 = " --tokenizer " + kFixtures + "/gpt2/tokenizer.json --split-on-line __ggml_vocab_test__ ";
  ASSERT_EQ(RunLlmplan("data prepare --threads 1" + gpt2 + "--out " + g1 + " " + part).status, 0);
  ASSERT_EQ(RunLlmplan("data prepare --threads 2" + gpt2 + "--out " + g2 + " " + part).status, 0);
  EXPECT_EQ(Tokens(g1), Tokens(g2));
  EXPECT_GT(Tokens(g1).size(), 500000u);
}

TEST_F(DataPrepareTest, TokenizerErrorsAreOneLineAndWriteNothing) {
  const std::string text = WriteText("t.txt", "text");
  const std::string out = (dir_ / "never.bin").string();
  const CommandResult missing = RunLlmplan("data prepare --tokenizer " + (dir_ / "nope.json").string() + " --out " +
                                           out + " " + text);
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_NE(missing.output.find("nope.json"), std::string::npos) << missing.output;
  EXPECT_EQ(std::count(missing.output.begin(), missing.output.end(), '\n'), 1) << missing.output;
  const CommandResult wordpiece = RunLlmplan("data prepare --tokenizer " +
                                             WriteText("wp.json", R"({"model": {"type": "WordPiece"}})") +
                                             " --out " + out + " " + text);
  EXPECT_EQ(wordpiece.status, 2) << wordpiece.output;
  EXPECT_NE(wordpiece.output.find("'WordPiece' is not supported"), std::string::npos) << wordpiece.output;
  const CommandResult narrow = RunLlmplan("data prepare --format raw-u16 --tokenizer " + kFixtures +
                                          "/llama3/tokenizer.json --out " + out + " " + text);
  EXPECT_EQ(narrow.status, 2) << narrow.output;
  EXPECT_NE(narrow.output.find("needs 4-byte tokens: use --format llmc or raw-u32"), std::string::npos)
      << narrow.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace llmplan::data
