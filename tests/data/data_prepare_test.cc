// `llmplan data prepare` through the built binary: the byte-level tokens and
// the header it writes, real tokenizers (ids from the reference
// implementations, tests/data/tokenizers), the order of tokens encoded on
// several threads, the document index beside every token file, --jsonl, and
// one-line errors with exit status 2.
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

#include "data/document_index.h"
#include "data/loss_mask.h"
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
  // The document starts in the index beside token file `path`.
  std::vector<int64_t> Starts(const std::string& path, TokenFileFormat format = TokenFileFormat::kAuto) {
    return DocumentIndex(DocumentIndexPathFor(path), TokenFile(path, format).size()).starts();
  }
  std::string Contents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
  EXPECT_EQ(Starts(out), (std::vector<int64_t>{0, 4}));
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
  EXPECT_EQ(Starts(out, TokenFileFormat::kRawU16), (std::vector<int64_t>{0, 5, 11}));
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
  EXPECT_EQ(Starts(out), (std::vector<int64_t>{0, static_cast<int64_t>(tokens.size() - ids.size() - 2)}));
}

TEST_F(DataPrepareTest, DocumentStartsAreTheFilesTokenOffsets) {
  // An empty file is no document; a real tokenizer adds its ids between
  // <s> and </s>.
  const std::vector<std::string> texts = {"First file.\n", "", "Second, longer file\nof two lines.\n", "3"};
  std::string files;
  for (size_t i = 0; i < texts.size(); ++i) files += " " + WriteText("f" + std::to_string(i) + ".txt", texts[i]);
  const std::string out = (dir_ / "files.bin").string();
  const std::string llama2 = " --tokenizer " + kFixtures + "/llama2/tokenizer.model ";
  ASSERT_EQ(RunLlmplan("data prepare" + llama2 + "-o " + out + files).status, 0);
  // Each non-empty file alone gives its document's tokens.
  std::vector<int64_t> offsets, all;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) continue;
    const std::string one = (dir_ / ("one" + std::to_string(i) + ".bin")).string();
    const std::string input = (dir_ / ("f" + std::to_string(i) + ".txt")).string();
    ASSERT_EQ(RunLlmplan("data prepare" + llama2 + "-o " + one + " " + input).status, 0);
    const std::vector<int64_t> tokens = Tokens(one);
    EXPECT_EQ(tokens.front(), 1);
    EXPECT_EQ(Starts(one), std::vector<int64_t>{0});
    offsets.push_back(static_cast<int64_t>(all.size()));
    all.insert(all.end(), tokens.begin(), tokens.end());
  }
  EXPECT_EQ(Tokens(out), all);
  EXPECT_EQ(Starts(out), offsets);
  EXPECT_EQ(offsets.size(), 3u);
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
  // Split into parts and jobs, it is still one document.
  EXPECT_EQ(Starts(one), std::vector<int64_t>{0});
  EXPECT_EQ(Starts(two), std::vector<int64_t>{0});

  // A real tokenizer over several jobs: the same ids with one thread or two.
  const std::string part = WriteText("part.txt", big.substr(0, size_t{3} << 20));
  const std::string g1 = (dir_ / "g1.bin").string(), g2 = (dir_ / "g2.bin").string();
  const std::string gpt2 = " --tokenizer " + kFixtures + "/gpt2/tokenizer.json --split-on-line __ggml_vocab_test__ ";
  ASSERT_EQ(RunLlmplan("data prepare --threads 1" + gpt2 + "--out " + g1 + " " + part).status, 0);
  ASSERT_EQ(RunLlmplan("data prepare --threads 2" + gpt2 + "--out " + g2 + " " + part).status, 0);
  EXPECT_EQ(Tokens(g1), Tokens(g2));
  EXPECT_GT(Tokens(g1).size(), 500000u);
  EXPECT_EQ(Starts(g1), Starts(g2));
  EXPECT_GT(Starts(g1).size(), 1000u);
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

// --chat: conversations in the model's chat format, a loss mask beside the
// tokens, and one-line errors that leave no file behind.
class ChatPrepareTest : public DataPrepareTest {
 protected:
  std::vector<uint8_t> Mask(const std::string& token_path) {
    const int64_t n = TokenFile(token_path).size();
    LossMaskFile mask(LossMaskPathFor(token_path), n);
    std::vector<uint8_t> bits(static_cast<size_t>(n));
    mask.Copy(0, n, bits.data());
    return bits;
  }
  // Runs `args`, expects exit status 2 and one line holding `message`, and
  // that neither the token file nor its mask was written.
  void ExpectFails(const std::string& args, const std::string& out, const std::string& message) {
    const CommandResult r = RunLlmplan("data prepare " + args);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
    EXPECT_FALSE(std::filesystem::exists(LossMaskPathFor(out))) << args;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
    }
  }
  const std::string llama3_ = " --tokenizer " + kFixtures + "/llama3/tokenizer.json ";
};

const char* kGreeting =
    R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}, )"
    R"({"role": "assistant", "content": "Hello!"}]})";

TEST_F(ChatPrepareTest, Llama3ConversationsAndTheirMask) {
  const std::string chat = WriteText("chat.jsonl", std::string(kGreeting) + "\n\n" + kGreeting + "\n");
  const std::string out = (dir_ / "chat.bin").string();
  const CommandResult r = RunLlmplan("data prepare --chat " + chat + llama3_ + "-o " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 46 tokens (2 documents"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("chat format llama3; loss mask " + out + ".lossmask: 6 of 46 tokens trained (13.0%)"),
            std::string::npos)
      << r.output;
  const std::vector<int64_t> one = {128000, 128006, 9125,  128007, 271,    3513,  10015, 13,
                                    128009, 128006, 882,   128007, 271,    13347, 1070,  128009,
                                    128006, 78191,  128007, 271,   9906,   0,     128009};
  std::vector<int64_t> both = one;
  both.insert(both.end(), one.begin(), one.end());
  EXPECT_EQ(Tokens(out), both);
  std::vector<uint8_t> bits(one.size(), 0);
  bits[20] = bits[21] = bits[22] = 1;  // "Hello" "!" <|eot_id|>
  std::vector<uint8_t> both_bits = bits;
  both_bits.insert(both_bits.end(), bits.begin(), bits.end());
  EXPECT_EQ(Mask(out), both_bits);
  EXPECT_EQ(Starts(out), (std::vector<int64_t>{0, 23}));  // one document a conversation

  const CommandResult inspect = RunLlmplan("data inspect " + out);
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("documents: 2 (mean 23 tokens, longest 23)\n"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("loss mask: 6 of 46 tokens trained (13.0%)"), std::string::npos) << inspect.output;
}

TEST_F(ChatPrepareTest, MistralNeedsItsFormatNamed) {
  const std::string chat = WriteText("chat.jsonl", R"({"messages": [{"role": "user", "content": "user message"}, )"
                                                   R"({"role": "assistant", "content": "assistant message"}]})");
  const std::string out = (dir_ / "m.bin").string();
  const std::string mistral = " --tokenizer " + kFixtures + "/mistral/tokenizer.json ";
  ExpectFails("--chat " + chat + mistral + "-o " + out, out, "pass --chat-format llama3, chatml or mistral");
  const CommandResult r = RunLlmplan("data prepare --chat " + chat + mistral + "--chat-format mistral -o " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(Tokens(out), (std::vector<int64_t>{1, 733, 16289, 28793, 2188, 2928, 733, 28748, 16289, 28793, 13892,
                                                2928, 2}));
  EXPECT_EQ(Mask(out), (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
}

TEST_F(ChatPrepareTest, BadInputsAreOneLineExitTwoAndWriteNothing) {
  const std::string out = (dir_ / "never.bin").string();
  const std::string good = std::string(kGreeting) + "\n";
  const auto chat = [&](const std::string& name, const std::string& text) {
    return "--chat " + WriteText(name, text) + llama3_ + "-o " + out;
  };
  ExpectFails(chat("a.jsonl", good + "{\"messages\": [\n"), out, "a.jsonl:2: not JSON");
  ExpectFails(chat("b.jsonl", good + good + "{\"prompt\": \"x\"}\n"), out, "b.jsonl:3: no \"messages\" array");
  ExpectFails(chat("c.jsonl", R"({"messages": [{"role": "user", "content": "x"}]})"), out,
              "c.jsonl:1: has no assistant turn: nothing to train");
  ExpectFails(chat("d.jsonl", R"({"messages": [{"role": "bot", "content": "x"}]})"), out,
              "d.jsonl:1: message 1 has role 'bot': the accepted roles are system, user and assistant");
  ExpectFails(chat("e.jsonl", R"({"messages": [{"role": "assistant", "content": 42}]})"), out,
              "e.jsonl:1: message 1 (assistant): \"content\" is not a string (number)");
  const std::string file = WriteText("f.jsonl", good);
  ExpectFails("--chat " + file + " -o " + out, out, "--chat needs --tokenizer");
  ExpectFails("--chat " + file + llama3_ + "-o " + out + " " + WriteText("t.txt", "text"), out,
              "pass no text files with it");
  ExpectFails("--chat " + file + llama3_ + "--chat-format alpaca -o " + out, out, "--chat-format");
  ExpectFails(llama3_ + "-o " + out, out, "nothing to tokenize: pass text files, or --chat FILE.jsonl");
}

TEST_F(ChatPrepareTest, InspectRefusesABadMaskInOneLine) {
  const std::string out = (dir_ / "chat.bin").string();
  ASSERT_EQ(RunLlmplan("data prepare --chat " + WriteText("c.jsonl", kGreeting) + llama3_ + "-o " + out).status, 0);
  std::filesystem::resize_file(LossMaskPathFor(out), 26);
  const CommandResult r = RunLlmplan("data inspect " + out);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(out + ".lossmask: 26 bytes, but 23 tokens take 27: the file is truncated"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST_F(ChatPrepareTest, TextPreparationRemovesAStaleMask) {
  const std::string out = (dir_ / "chat.bin").string();
  ASSERT_EQ(RunLlmplan("data prepare --chat " + WriteText("c.jsonl", kGreeting) + llama3_ + "-o " + out).status, 0);
  ASSERT_TRUE(std::filesystem::exists(LossMaskPathFor(out)));
  ASSERT_EQ(RunLlmplan("data prepare -o " + out + " " + WriteText("t.txt", "text")).status, 0);
  EXPECT_FALSE(std::filesystem::exists(LossMaskPathFor(out)));
}

// --split: whole documents, chosen by their index, in a second file.
std::vector<std::vector<int64_t>> Documents(const std::vector<int64_t>& tokens, int64_t end) {
  std::vector<std::vector<int64_t>> documents(1);
  for (int64_t t : tokens) {
    documents.back().push_back(t);
    if (t == end) documents.emplace_back();
  }
  documents.pop_back();  // empty after the last end
  return documents;
}

// Where each of `documents` begins when they are written back to back.
std::vector<int64_t> Offsets(const std::vector<std::vector<int64_t>>& documents) {
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const auto& document : documents) {
    offsets.push_back(at);
    at += static_cast<int64_t>(document.size());
  }
  return offsets;
}

TEST_F(DataPrepareTest, SplitHoldsOutWholeDocumentsNoneTwice) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "document " + std::to_string(i) + "\n%\n";
  const std::string input = WriteText("docs.txt", text);
  const std::string out = (dir_ / "train.bin").string();
  const CommandResult r = RunLlmplan("data prepare --split 0.1 --split-on-line % -o " + out + " " + input);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string eval = (dir_ / "train.eval.bin").string();
  const auto kept = Documents(Tokens(out), 256), held = Documents(Tokens(eval), 256);
  EXPECT_EQ(kept.size() + held.size(), 200u);
  EXPECT_GT(held.size(), 5u);
  EXPECT_LT(held.size(), 40u);
  EXPECT_NE(r.output.find("(" + std::to_string(kept.size()) + " documents"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("and " + std::to_string(Tokens(eval).size()) + " tokens (" + std::to_string(held.size()) +
                          " documents held out by --split 0.1) to " + eval),
            std::string::npos)
      << r.output;
  // Together every document once, each file in input order; held-out ones
  // spread over the corpus (not only its end).
  std::vector<std::string> seen;
  for (const auto* file : {&kept, &held}) {
    int last = -1;
    for (const auto& doc : *file) {
      const std::string s(doc.begin(), doc.end() - 2);  // without "\n" and end of text
      const int index = std::stoi(s.substr(9));
      EXPECT_GT(index, last);
      last = index;
      seen.push_back(s);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(seen.size(), 200u);
  const std::string first_held(held.front().begin(), held.front().end() - 2);
  EXPECT_LT(std::stoi(first_held.substr(9)), 100);
  // Each file has its own index, of its own documents.
  EXPECT_EQ(Starts(out), Offsets(kept));
  EXPECT_EQ(Starts(eval), Offsets(held));
  // The same documents every time, on any number of threads.
  const std::string again = (dir_ / "again.bin").string(), again_eval = (dir_ / "again.held.bin").string();
  ASSERT_EQ(RunLlmplan("data prepare --threads 1 --split 0.1 --split-out " + again_eval + " --split-on-line % -o " +
                       again + " " + input)
                .status,
            0);
  EXPECT_EQ(Tokens(again), Tokens(out));
  EXPECT_EQ(Tokens(again_eval), Tokens(eval));
  EXPECT_EQ(Contents(DocumentIndexPathFor(again_eval)), Contents(DocumentIndexPathFor(eval)));
}

TEST_F(ChatPrepareTest, SplitGivesTheHeldOutFileItsOwnMask) {
  std::string text;
  for (int i = 0; i < 40; ++i) {
    text += R"({"messages": [{"role": "user", "content": "q)" + std::to_string(i) +
            R"("}, {"role": "assistant", "content": "a"}]})" + "\n";
  }
  const std::string out = (dir_ / "chat.bin").string(), eval = (dir_ / "held.bin").string();
  const CommandResult r =
      RunLlmplan("data prepare --chat " + WriteText("c.jsonl", text) + llama3_ + "--split 0.25 --split-out " + eval +
                 " -o " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto kept = Documents(Tokens(out), 128009), held = Documents(Tokens(eval), 128009);
  // Each conversation ends with its answer's <|eot_id|>: two per document.
  EXPECT_EQ(kept.size() + held.size(), 80u);
  EXPECT_GT(held.size(), 0u);
  const std::vector<uint8_t> kept_bits = Mask(out), held_bits = Mask(eval);
  EXPECT_EQ(std::count(kept_bits.begin(), kept_bits.end(), 1), static_cast<ptrdiff_t>(kept.size()));  // "a" <|eot_id|>
  EXPECT_EQ(std::count(held_bits.begin(), held_bits.end(), 1), static_cast<ptrdiff_t>(held.size()));
  EXPECT_NE(r.output.find(eval + ".lossmask: "), std::string::npos) << r.output;
  // A document a conversation: two of the pieces ending in <|eot_id|>.
  const auto conversations = [](const std::vector<std::vector<int64_t>>& pieces) {
    std::vector<std::vector<int64_t>> joined;
    for (size_t i = 0; i + 1 < pieces.size(); i += 2) {
      joined.push_back(pieces[i]);
      joined.back().insert(joined.back().end(), pieces[i + 1].begin(), pieces[i + 1].end());
    }
    return joined;
  };
  EXPECT_EQ(Starts(out), Offsets(conversations(kept)));
  EXPECT_EQ(Starts(eval), Offsets(conversations(held)));
}

TEST_F(DataPrepareTest, SplitErrors) {
  const std::string input = WriteText("one.txt", "a single document");
  const std::string out = (dir_ / "train.bin").string();
  for (const char* fraction : {"0", "1", "1.5", "-0.2"}) {
    const CommandResult r = RunLlmplan(std::string("data prepare --split ") + fraction + " -o " + out + " " + input);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("give the fraction of documents to hold out, between 0 and 1"), std::string::npos)
        << r.output;
  }
  const CommandResult r = RunLlmplan("data prepare --split 0.5 -o " + out + " " + input);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("of the 1 documents, leaving"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "train.eval.bin"));
  const CommandResult no_split = RunLlmplan("data prepare --split-out x.bin -o " + out + " " + input);
  EXPECT_EQ(no_split.status, 2) << no_split.output;
  EXPECT_NE(no_split.output.find("--split-out needs --split FRACTION"), std::string::npos) << no_split.output;
}

// --jsonl: each line's "text" string is one document, as a file would be.
TEST_F(DataPrepareTest, JsonlObjectsAreDocumentsLikeFiles) {
  const std::string first = "First document,\nwith \"quotes\" and \xc3\xa9.\n", second = "Second document.";
  const std::string jsonl = WriteText("docs.jsonl",
                                      R"({"text": "First document,\nwith \"quotes\" and \u00e9.\n", "id": 1})"
                                      "\n\n"
                                      R"({"meta": {"text": 3}, "text": "", "id": 2})"
                                      "\n"
                                      R"({"meta": {"tags": [1, 2]}, "text": "Second document."})");
  const std::string files = " " + WriteText("first.txt", first) + " " + WriteText("second.txt", second);
  for (const std::string& tokenizer : {std::string(), " --tokenizer " + kFixtures + "/llama3/tokenizer.json "}) {
    const std::string from_files = (dir_ / "files.bin").string(), from_jsonl = (dir_ / "jsonl.bin").string();
    ASSERT_EQ(RunLlmplan("data prepare" + tokenizer + " -o " + from_files + files).status, 0);
    const CommandResult r = RunLlmplan("data prepare --jsonl" + tokenizer + " -o " + from_jsonl + " " + jsonl);
    ASSERT_EQ(r.status, 0) << r.output;
    // The empty text is no document, as an empty file is none.
    EXPECT_NE(r.output.find(" tokens (2 documents, "), std::string::npos) << r.output;
    EXPECT_EQ(Tokens(from_jsonl), Tokens(from_files)) << tokenizer;
    EXPECT_EQ(Starts(from_jsonl), Starts(from_files)) << tokenizer;
    EXPECT_EQ(Starts(from_jsonl).size(), 2u);
  }
  // Another field holds the text.
  const std::string renamed = WriteText("renamed.jsonl",
                                        R"({"body": "First document,\nwith \"quotes\" and \u00e9.\n"})"
                                        "\n"
                                        R"({"body": "Second document.", "text": 7})"
                                        "\n");
  const std::string out = (dir_ / "renamed.bin").string(), bytes = (dir_ / "bytes.bin").string();
  const CommandResult r = RunLlmplan("data prepare --jsonl --text-field body -o " + out + " " + renamed);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(RunLlmplan("data prepare -o " + bytes + files).status, 0);
  EXPECT_EQ(Tokens(out), Tokens(bytes));
  EXPECT_EQ(Starts(out), Starts(bytes));
}

TEST_F(DataPrepareTest, JsonlBadLinesAreOneLineExitTwoAndWriteNothing) {
  const std::string kept = WriteText("kept.bin", "previous contents");
  const std::string kept_index = WriteText("kept.bin.docs", "previous index");
  const std::string fresh = (dir_ / "never.bin").string();
  const std::string good = R"({"text": "fine"})" "\n";
  struct Case {
    std::string name, text, message;
  };
  const std::string expected =
      ": each line must be one JSON object with the document as its \"text\" string (name another field with "
      "--text-field)";
  const std::vector<Case> cases = {
      {"a.jsonl", good + "{\"text\": \"unterminated\n", "a.jsonl:2: not JSON (syntax error at byte "},
      {"b.jsonl", good + "\n" + R"(["text", "x"])" + "\n", "b.jsonl:3: not a JSON object (array)" + expected},
      {"c.jsonl", good + R"({"content": "x"})" + "\n" + good, "c.jsonl:2: no \"text\" field" + expected},
      {"d.jsonl", R"({"text": 42})" "\n" + good, "d.jsonl:1: \"text\" is not a string (number)" + expected},
      {"e.jsonl", R"({"text": null})", "e.jsonl:1: \"text\" is not a string (null)"},
      {"f.jsonl", R"({"text": ["a", "b"]})", "f.jsonl:1: \"text\" is not a string (array)"},
  };
  for (const Case& c : cases) {
    const std::string input = WriteText(c.name, c.text);
    for (const std::string& out : {kept, fresh}) {
      const CommandResult r = RunLlmplan("data prepare --jsonl -o " + out + " " + input);
      EXPECT_EQ(r.status, 2) << r.output;
      EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
    EXPECT_EQ(Contents(kept), "previous contents") << c.name;
    EXPECT_EQ(Contents(kept_index), "previous index") << c.name;
    EXPECT_FALSE(std::filesystem::exists(fresh)) << c.name;
    EXPECT_FALSE(std::filesystem::exists(DocumentIndexPathFor(fresh))) << c.name;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
    }
  }
  // Options that do not go with --jsonl, and --text-field without it.
  const std::string input = WriteText("good.jsonl", good);
  const std::string text = WriteText("t.txt", "text");
  const std::vector<std::pair<std::string, std::string>> options = {
      {"--jsonl --chat " + input + " -o " + fresh + " " + input, "pass one or the other"},
      {"--jsonl --split-on-line % -o " + fresh + " " + input, "--split-on-line applies to text files"},
      {"--jsonl -o " + fresh, "nothing to tokenize: pass the JSON Lines files to read with --jsonl"},
      {"--text-field body -o " + fresh + " " + text, "--text-field body needs --jsonl"},
  };
  for (const auto& [args, message] : options) {
    const CommandResult r = RunLlmplan("data prepare " + args);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(std::filesystem::exists(fresh)) << args;
  }
}

TEST_F(DataPrepareTest, InspectPrintsTheDocuments) {
  std::string text;
  for (int i = 0; i < 1233; ++i) text += "ab\n%\n";  // 1,233 documents of 4 tokens
  text += std::string(2000, 'x');                  // and one of 2,001
  const std::string out = (dir_ / "tokens.bin").string();
  ASSERT_EQ(RunLlmplan("data prepare --split-on-line % -o " + out + " " + WriteText("d.txt", text)).status, 0);
  const CommandResult r = RunLlmplan("data inspect " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(" 6933 tokens of 2 bytes, largest id 256 (needs vocab >= 257)\n"
                          "documents: 1,234 (mean 6 tokens, longest 2,001)\n"),
            std::string::npos)
      << r.output;

  // A broken index is one line, exit status 2; without one, no documents line.
  std::filesystem::resize_file(DocumentIndexPathFor(out), 40);
  const CommandResult broken = RunLlmplan("data inspect " + out);
  EXPECT_EQ(broken.status, 2) << broken.output;
  EXPECT_NE(broken.output.find(out + ".docs: 40 bytes, but 1234 documents take 9904: the file is truncated"),
            std::string::npos)
      << broken.output;
  EXPECT_EQ(std::count(broken.output.begin(), broken.output.end(), '\n'), 1) << broken.output;
  std::filesystem::remove(DocumentIndexPathFor(out));
  const CommandResult none = RunLlmplan("data inspect " + out);
  EXPECT_EQ(none.status, 0) << none.output;
  EXPECT_EQ(none.output.find("documents:"), std::string::npos) << none.output;
}
}  // namespace
}  // namespace llmplan::data
