// Chat formats (data/chat_format.h) against real tokenizers: the exact ids of
// each family's template and exactly which of them are trained.
//
// Expected ids: Llama 3's from its tokenizer.json (<|begin_of_text|> 128000,
// <|start_header_id|> 128006, <|end_header_id|> 128007, <|eot_id|> 128009,
// "system" 9125, "user" 882, "assistant" 78191, "\n\n" 271, "Hello" 9906,
// "!" 0); Mistral's from mistral_common's worked example in Mistral's
// cookbook (concept-deep-dive/tokenization/chat_templates.md: "<s> [INST] user
// message [/INST] assistant message</s> [INST] new user message [/INST]" is
// 1 733 16289 28793 2188 2928 733 28748 16289 28793 13892 2928 2 733 16289
// 28793 633 2188 2928 733 28748 16289 28793); ChatML's from GPT-2's
// vocabulary ("system" 10057, "\n" 198, "user" 7220, "ass" "istant" 562
// 10167, "Hello" 15496, "!" 0) with <|im_start|> and <|im_end|> added, since
// there is no Qwen2 fixture (tests/data/tokenizers/README.md).
#include "data/chat_format.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "data/tokenizer.h"

namespace llmplan::data {
namespace {

const std::string kFixtures = LLMPLAN_TOKENIZER_FIXTURES;
using Role = ChatMessage::Role;

struct Rendered {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> trained;
};

Rendered Render(const Tokenizer& tokenizer, ChatFormat format, const std::vector<ChatMessage>& messages) {
  Rendered r;
  ChatRenderer(tokenizer, format).Render(messages, "test.jsonl:1", &r.ids, &r.trained);
  EXPECT_EQ(r.ids.size(), r.trained.size());
  return r;
}

std::string RenderError(const Tokenizer& tokenizer, ChatFormat format, const std::vector<ChatMessage>& messages) {
  try {
    Render(tokenizer, format, messages);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string ParseError(const std::string& line) {
  try {
    ParseChatLine(line, "chat.jsonl:7");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// A tokenizer.json fixture with extra added tokens, written to a temporary file.
class ExtendedTokenizer {
 public:
  ExtendedTokenizer(const std::string& fixture, const std::vector<std::pair<uint32_t, std::string>>& added) {
    std::ifstream in(kFixtures + "/" + fixture + "/tokenizer.json");
    nlohmann::json root = nlohmann::json::parse(in);
    for (const auto& [id, content] : added) {
      root["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                                      {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    path_ = (std::filesystem::temp_directory_path() /
             ("llmplan_chat_" + fixture + "_" + std::to_string(::getpid()) + ".json"))
                .string();
    std::ofstream(path_) << root.dump();
    tokenizer_ = LoadTokenizer(path_);
  }
  ~ExtendedTokenizer() { std::filesystem::remove(path_); }
  const Tokenizer& operator*() const { return *tokenizer_; }

 private:
  std::string path_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

const std::vector<ChatMessage> kGreeting = {
    {Role::kSystem, "Be brief."}, {Role::kUser, "Hi there"}, {Role::kAssistant, "Hello!"}};

TEST(ChatFormatTest, Llama3RendersItsTemplateAndTrainsTheAnswerAndEotId) {
  const auto tokenizer = LoadTokenizer(kFixtures + "/llama3/tokenizer.json");
  const Rendered r = Render(*tokenizer, ChatFormat::kLlama3, kGreeting);
  const std::vector<uint32_t> ids = {128000,                                                   // <|begin_of_text|>
                                     128006, 9125, 128007, 271, 3513, 10015, 13, 128009,       // system
                                     128006, 882, 128007, 271, 13347, 1070, 128009,            // user
                                     128006, 78191, 128007, 271, 9906, 0, 128009};             // assistant
  const std::vector<uint8_t> trained = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 0, 0, 1, 1, 1};
  EXPECT_EQ(r.ids, ids);
  EXPECT_EQ(r.trained, trained);
}

TEST(ChatFormatTest, Llama3TrimsContentAsTheTemplateDoes) {
  const auto tokenizer = LoadTokenizer(kFixtures + "/llama3/tokenizer.json");
  const Rendered padded = Render(*tokenizer, ChatFormat::kLlama3, {{Role::kUser, "  Hi there\n"}, {Role::kAssistant, "\nHello! "}});
  const Rendered plain = Render(*tokenizer, ChatFormat::kLlama3, {{Role::kUser, "Hi there"}, {Role::kAssistant, "Hello!"}});
  EXPECT_EQ(padded.ids, plain.ids);
  EXPECT_EQ(padded.trained, plain.trained);
}

TEST(ChatFormatTest, MistralV1MatchesMistralCommonsWorkedExample) {
  const auto tokenizer = LoadTokenizer(kFixtures + "/mistral/tokenizer.json");
  const Rendered r = Render(*tokenizer, ChatFormat::kMistral,
                            {{Role::kUser, "user message"},
                             {Role::kAssistant, "assistant message"},
                             {Role::kUser, "new user message"}});
  const std::vector<uint32_t> ids = {1,     733,  16289, 28793, 2188, 2928,  733,  28748, 16289, 28793, 13892, 2928,
                                     2,     733,  16289, 28793, 633,  2188,  2928, 733,   28748, 16289, 28793};
  const std::vector<uint8_t> trained = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(r.ids, ids);
  EXPECT_EQ(r.trained, trained);
}

TEST(ChatFormatTest, MistralV1PrependsTheSystemMessageToTheFirstUserTurn) {
  const auto tokenizer = LoadTokenizer(kFixtures + "/mistral/tokenizer.json");
  const Rendered r = Render(*tokenizer, ChatFormat::kMistral,
                            {{Role::kSystem, "Be brief."},
                             {Role::kUser, "Hi there"},
                             {Role::kAssistant, "Hello!"},
                             {Role::kUser, "Bye"},
                             {Role::kAssistant, "Bye now"}});
  // <s> "[INST] Be brief.\n\nHi there [/INST]" "Hello!" </s> "[INST] Bye [/INST]" "Bye now" </s>
  const std::vector<uint32_t> ids = {1,     733,  16289, 28793, 1739,  6817,  28723, 13,    13,   23809,
                                     736,   733,  28748, 16289, 28793, 22557, 28808, 2,     733,  16289,
                                     28793, 2463, 28706, 733,   28748, 16289, 28793, 2463,  28706, 1055, 2};
  const std::vector<uint8_t> trained = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                        1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
  EXPECT_EQ(r.ids, ids);
  EXPECT_EQ(r.trained, trained);
}

TEST(ChatFormatTest, MistralWithInstTokensPrependsTheSystemMessageToTheLastUserTurn) {
  const ExtendedTokenizer tokenizer("mistral", {{32000, "[INST]"}, {32001, "[/INST]"}});
  EXPECT_EQ(DetectChatFormat(*tokenizer), ChatFormat::kMistral);
  const Rendered r = Render(*tokenizer, ChatFormat::kMistral,
                            {{Role::kSystem, "Be brief."},
                             {Role::kUser, "Hi there"},
                             {Role::kAssistant, "Hello!"},
                             {Role::kUser, "Bye"},
                             {Role::kAssistant, "Bye now"}});
  // <s>[INST]▁Hi▁there[/INST]▁Hello!</s>[INST]▁Be▁brief.\n\nBye[/INST]▁Bye▁now</s>
  const std::vector<uint32_t> ids = {1,     32000, 15359, 736,  32001, 22557, 28808, 2,     32000, 1739, 6817,
                                     28723, 13,    13,    1930, 28706, 32001, 2463,  28706, 1055,  2};
  const std::vector<uint8_t> trained = {0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
  EXPECT_EQ(r.ids, ids);
  EXPECT_EQ(r.trained, trained);
}

TEST(ChatFormatTest, MistralNeedsAlternatingTurns) {
  const auto tokenizer = LoadTokenizer(kFixtures + "/mistral/tokenizer.json");
  const std::string error = RenderError(*tokenizer, ChatFormat::kMistral,
                                        {{Role::kUser, "a"}, {Role::kUser, "b"}, {Role::kAssistant, "c"}});
  EXPECT_EQ(error,
            "test.jsonl:1: message 2 is user, where the mistral format needs assistant: after one optional first "
            "system message, turns must alternate user, assistant, user, ...");
}

TEST(ChatFormatTest, ChatMlRendersImStartRoleNewlineContentImEnd) {
  const ExtendedTokenizer tokenizer("gpt2", {{50257, "<|im_start|>"}, {50258, "<|im_end|>"}});
  EXPECT_EQ(DetectChatFormat(*tokenizer), ChatFormat::kChatMl);
  const Rendered r = Render(*tokenizer, ChatFormat::kChatMl, kGreeting);
  const std::vector<uint32_t> ids = {50257, 10057, 198,   3856, 4506, 13, 50258, 198,     // system
                                     50257, 7220,  198,   17250, 612, 50258, 198,         // user
                                     50257, 562,   10167, 198,  15496, 0,  50258, 198};   // assistant
  const std::vector<uint8_t> trained = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 0, 0, 1, 1, 1, 0};
  EXPECT_EQ(r.ids, ids);
  EXPECT_EQ(r.trained, trained);
}

TEST(ChatFormatTest, ATokenSpanningHeaderAndContentIsContent) {
  // Llama 3's pre-tokenizer (like Qwen2's) joins newlines: "assistant\n" +
  // "\nHello" is "assistant" "\n\n" (271) "Hello", and 271 is the answer's.
  const ExtendedTokenizer tokenizer("llama3", {{128256, "<|im_start|>"}, {128257, "<|im_end|>"}});
  const Rendered r = Render(*tokenizer, ChatFormat::kChatMl, {{Role::kUser, "Hi"}, {Role::kAssistant, "\nHello"}});
  const std::vector<uint32_t> tail(r.ids.end() - 6, r.ids.end());
  EXPECT_EQ(tail, (std::vector<uint32_t>{128256, 78191, 271, 9906, 128257, 198}));
  const std::vector<uint8_t> bits(r.trained.end() - 6, r.trained.end());
  EXPECT_EQ(bits, (std::vector<uint8_t>{0, 0, 1, 1, 1, 0}));
}

TEST(ChatFormatTest, DetectsTheFormatFromSpecialTokens) {
  EXPECT_EQ(DetectChatFormat(*LoadTokenizer(kFixtures + "/llama3/tokenizer.json")), ChatFormat::kLlama3);
  try {
    DetectChatFormat(*LoadTokenizer(kFixtures + "/mistral/tokenizer.json"));
    FAIL() << "a v1 Mistral tokenizer has no chat tokens";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("pass --chat-format llama3, chatml or mistral"), std::string::npos) << message;
  }
  EXPECT_EQ(ParseChatFormat("chatml"), ChatFormat::kChatMl);
  EXPECT_THROW(ParseChatFormat("alpaca"), UserError);
}

TEST(ChatFormatTest, AFormatWhoseTokensTheTokenizerLacksIsRefused) {
  const auto tokenizer = LoadTokenizer(kFixtures + "/mistral/tokenizer.json");
  try {
    ChatRenderer renderer(*tokenizer, ChatFormat::kLlama3);
    FAIL() << "Mistral's tokenizer has no <|begin_of_text|>";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("chat format llama3 writes the token <|begin_of_text|>"), std::string::npos)
        << e.what();
  }
}

TEST(ChatFormatTest, AConversationWithoutAnAssistantTurnHasNothingToTrain) {
  const auto tokenizer = LoadTokenizer(kFixtures + "/llama3/tokenizer.json");
  EXPECT_EQ(RenderError(*tokenizer, ChatFormat::kLlama3, {{Role::kSystem, "s"}, {Role::kUser, "u"}}),
            "test.jsonl:1: has no assistant turn: nothing to train");
}

TEST(ChatFormatTest, ParsesOpenAiMessages) {
  const auto messages = ParseChatLine(
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u", "name": "x"},
                       {"role": "assistant", "content": "a\n\"b\""}]})",
      "chat.jsonl:1");
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0].role, Role::kSystem);
  EXPECT_EQ(messages[1].role, Role::kUser);
  EXPECT_EQ(messages[2].role, Role::kAssistant);
  EXPECT_EQ(messages[2].content, "a\n\"b\"");
}

TEST(ChatFormatTest, ParseErrorsNameTheLine) {
  EXPECT_NE(ParseError("{\"messages\": [").find("chat.jsonl:7: not JSON (syntax error at byte"), std::string::npos)
      << ParseError("{\"messages\": [");
  EXPECT_NE(ParseError("{\"conversation\": []}").find("chat.jsonl:7: no \"messages\" array"), std::string::npos);
  EXPECT_NE(ParseError("[1, 2]").find("chat.jsonl:7: no \"messages\" array"), std::string::npos);
  EXPECT_EQ(ParseError(R"({"messages": [{"role": "tool", "content": "x"}]})"),
            "chat.jsonl:7: message 1 has role 'tool': the accepted roles are system, user and assistant");
  EXPECT_EQ(ParseError(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]})"),
            "chat.jsonl:7: message 1 (user): \"content\" is not a string (array): give the text as one string");
  EXPECT_EQ(ParseError(R"({"messages": [{"role": "assistant"}]})"),
            "chat.jsonl:7: message 1 (assistant): \"content\" is missing: give the text as one string");
  EXPECT_EQ(ParseError(R"({"messages": ["hi"]})"),
            "chat.jsonl:7: message 1 is not an object with \"role\" and \"content\"");
}

}  // namespace
}  // namespace llmplan::data
