// Chat formats: a conversation ({"messages": [{"role", "content"}, ...]}, one
// JSON object a line, OpenAI's fine-tuning layout) rendered into token ids the
// way a model family's chat template renders it, with a loss-mask bit per id
// (loss_mask.h): 1 for the assistant's content and the end token of its turn,
// 0 for everything else (begin of text, role headers, system and user turns).
// Fine-tuning then learns to answer, not to write prompts.
//
//   llama3   Meta-Llama-3-*-Instruct's template: <|begin_of_text|>, then per
//            message <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//            with CONTENT trimmed of surrounding whitespace (the template's
//            `| trim`).
//   chatml   ChatML (Qwen2, Qwen2.5): per message
//            <|im_start|>ROLE\nCONTENT<|im_end|>\n. Qwen's own templates add a
//            default system message when a conversation has none; this does
//            not: give one in the data to train with it.
//   mistral  mistral_common's instruct encoding (Mistral 7B, Mixtral): <s>,
//            then user turns as [INST] CONTENT [/INST] and assistant turns as
//            CONTENT</s>, each message encoded on its own (so with
//            SentencePiece's leading space). A system message comes first and
//            is prepended to a user turn with "\n\n": the first one where
//            [INST] is text (tokenizer v1), the last one where [INST] and
//            [/INST] are tokens (v2/v3: then [INST]CONTENT[/INST]). Turns
//            must alternate user, assistant, user, ...
//
// Text between special tokens is tokenized as Hugging Face tokenizes the
// rendered template (each stretch between added tokens on its own). Where a
// token spans a role header and the content after it, it counts as content.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace llmplan::data {

enum class ChatFormat { kLlama3, kChatMl, kMistral };

// Parses "llama3", "chatml", "mistral" (as given to --chat-format). Throws
// UserError naming the accepted names.
ChatFormat ParseChatFormat(const std::string& name);
std::string ChatFormatName(ChatFormat format);

// The format whose special tokens `tokenizer` has: <|start_header_id|>,
// <|end_header_id|> and <|eot_id|> -> llama3; <|im_start|> and <|im_end|> ->
// chatml; [INST] and [/INST] -> mistral. Throws UserError naming the formats
// and --chat-format when it has none of them (Mistral's v1 tokenizers, whose
// [INST] is text, among them).
ChatFormat DetectChatFormat(const Tokenizer& tokenizer);

struct ChatMessage {
  enum class Role { kSystem, kUser, kAssistant };
  Role role = Role::kUser;
  std::string content;
};

// Parses one line of a chat JSONL file. `where` ("FILE:LINE") starts every
// message. Throws UserError when the line is not JSON, not an object with a
// "messages" array, a message is not an object, its role is missing or not
// system/user/assistant, or its content is not a string.
std::vector<ChatMessage> ParseChatLine(std::string_view line, const std::string& where);

class ChatRenderer {
 public:
  // REQUIRES: `tokenizer` outlives this. Throws UserError when the tokenizer
  // lacks a special token the format writes.
  ChatRenderer(const Tokenizer& tokenizer, ChatFormat format);

  ChatFormat format() const { return format_; }

  // Appends the ids of one conversation to `ids` and one 0/1 per id to
  // `trained`. Thread-safe. Throws UserError starting with `where` when the
  // conversation has no assistant turn (nothing to train) or the format
  // cannot render its order of roles (mistral).
  void Render(const std::vector<ChatMessage>& messages, const std::string& where, std::vector<uint32_t>* ids,
              std::vector<uint8_t>* trained) const;

 private:
  uint32_t Require(const char* token) const;
  // Appends Encode(prefix + content) with the ids past Encode(prefix) marked
  // `content_trained`.
  void AppendSpan(const std::string& prefix, const std::string& content, bool content_trained,
                  std::vector<uint32_t>* ids, std::vector<uint8_t>* trained) const;
  void RenderLlama3(const std::vector<ChatMessage>& messages, std::vector<uint32_t>* ids,
                    std::vector<uint8_t>* trained) const;
  void RenderChatMl(const std::vector<ChatMessage>& messages, std::vector<uint32_t>* ids,
                    std::vector<uint8_t>* trained) const;
  void RenderMistral(const std::vector<ChatMessage>& messages, const std::string& where,
                     std::vector<uint32_t>* ids, std::vector<uint8_t>* trained) const;

  const Tokenizer& tokenizer_;
  ChatFormat format_;
  // The format's special tokens (those it uses are set).
  uint32_t begin_ = 0, end_ = 0;             // <|begin_of_text|> / <s>; <|eot_id|> / <|im_end|> / </s>
  uint32_t header_start_ = 0, header_end_ = 0;  // <|start_header_id|>, <|end_header_id|>; <|im_start|>
  std::optional<uint32_t> inst_, inst_end_;  // mistral v2/v3: [INST], [/INST] as tokens
};

}  // namespace llmplan::data
