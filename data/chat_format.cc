// Chat formats: parsing a JSONL line and rendering it per family. The formats
// and what is trained are documented in chat_format.h.
#include "data/chat_format.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/user_error.h"

namespace llmplan::data {

namespace {

using nlohmann::json;
using Role = ChatMessage::Role;

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
  }
  return "?";
}

// Jinja's `trim` (Python's str.strip() on the template's text): the
// whitespace of ASCII text.
std::string Trim(const std::string& s) {
  const char* space = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

void Push(uint32_t id, bool is_trained, std::vector<uint32_t>* ids, std::vector<uint8_t>* trained) {
  ids->push_back(id);
  trained->push_back(is_trained ? 1 : 0);
}

}  // namespace

ChatFormat ParseChatFormat(const std::string& name) {
  if (name == "llama3") return ChatFormat::kLlama3;
  if (name == "chatml") return ChatFormat::kChatMl;
  if (name == "mistral") return ChatFormat::kMistral;
  throw UserError("unknown chat format '" + name + "': use llama3, chatml or mistral");
}

std::string ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kChatMl: return "chatml";
    case ChatFormat::kMistral: return "mistral";
  }
  return "?";
}

ChatFormat DetectChatFormat(const Tokenizer& tokenizer) {
  const auto has = [&](const char* token) { return tokenizer.SpecialTokenId(token).has_value(); };
  if (has("<|start_header_id|>") && has("<|end_header_id|>") && has("<|eot_id|>")) return ChatFormat::kLlama3;
  if (has("<|im_start|>") && has("<|im_end|>")) return ChatFormat::kChatMl;
  if (has("[INST]") && has("[/INST]")) return ChatFormat::kMistral;
  throw UserError("cannot tell the chat format from the tokenizer's special tokens (" + tokenizer.description() +
                  "; none of <|start_header_id|>, <|im_start|>, [INST]): pass --chat-format llama3, chatml or "
                  "mistral (Mistral 7B v0.1/v0.2 tokenizers write [INST] as text: --chat-format mistral)");
}

std::vector<ChatMessage> ParseChatLine(std::string_view line, const std::string& where) {
  const std::string expected = R"(: each line must be one JSON object {"messages": [{"role": ..., "content": ...}]})";
  json root;
  try {
    root = json::parse(line);
  } catch (const json::parse_error& e) {
    throw UserError(where + ": not JSON (syntax error at byte " + std::to_string(e.byte) + ")" + expected);
  }
  if (!root.is_object() || !root.contains("messages") || !root.at("messages").is_array()) {
    throw UserError(where + ": no \"messages\" array" + expected);
  }
  std::vector<ChatMessage> messages;
  int index = 0;
  for (const json& m : root.at("messages")) {
    ++index;
    const std::string which = where + ": message " + std::to_string(index);
    if (!m.is_object()) throw UserError(which + " is not an object with \"role\" and \"content\"");
    if (!m.contains("role") || !m.at("role").is_string()) throw UserError(which + " has no \"role\" string");
    const std::string role = m.at("role").get<std::string>();
    ChatMessage message;
    if (role == "system") {
      message.role = Role::kSystem;
    } else if (role == "user") {
      message.role = Role::kUser;
    } else if (role == "assistant") {
      message.role = Role::kAssistant;
    } else {
      throw UserError(which + " has role '" + role + "': the accepted roles are system, user and assistant");
    }
    if (!m.contains("content") || !m.at("content").is_string()) {
      throw UserError(which + " (" + role + "): \"content\" is " +
                      (m.contains("content") ? std::string("not a string (") + m.at("content").type_name() + ")"
                                             : std::string("missing")) +
                      ": give the text as one string");
    }
    message.content = m.at("content").get<std::string>();
    messages.push_back(std::move(message));
  }
  return messages;
}

ChatRenderer::ChatRenderer(const Tokenizer& tokenizer, ChatFormat format) : tokenizer_(tokenizer), format_(format) {
  switch (format) {
    case ChatFormat::kLlama3:
      begin_ = Require("<|begin_of_text|>");
      header_start_ = Require("<|start_header_id|>");
      header_end_ = Require("<|end_header_id|>");
      end_ = Require("<|eot_id|>");
      break;
    case ChatFormat::kChatMl:
      header_start_ = Require("<|im_start|>");
      end_ = Require("<|im_end|>");
      break;
    case ChatFormat::kMistral:
      begin_ = Require("<s>");
      end_ = Require("</s>");
      inst_ = tokenizer.SpecialTokenId("[INST]");
      inst_end_ = tokenizer.SpecialTokenId("[/INST]");
      if (!inst_ || !inst_end_) {  // both as tokens (v2/v3), or both as text (v1)
        inst_.reset();
        inst_end_.reset();
      }
      break;
  }
}

uint32_t ChatRenderer::Require(const char* token) const {
  const auto id = tokenizer_.SpecialTokenId(token);
  if (!id) {
    throw UserError("chat format " + ChatFormatName(format_) + " writes the token " + token + ", which the tokenizer (" +
                    tokenizer_.description() + ") does not have: pass the model's own tokenizer or the right "
                    "--chat-format (llama3, chatml or mistral)");
  }
  return *id;
}

void ChatRenderer::AppendSpan(const std::string& prefix, const std::string& content, bool content_trained,
                              std::vector<uint32_t>* ids, std::vector<uint8_t>* trained) const {
  std::vector<uint32_t> whole, head;
  if (prefix.empty() && content.empty()) return;
  tokenizer_.Encode(prefix + content, true, &whole);
  if (!content.empty() && !prefix.empty()) tokenizer_.Encode(prefix, true, &head);
  if (content.empty()) head = whole;
  // The ids the prefix gives on its own and at the start of the whole; a
  // token that crosses into the content is the content's.
  size_t shared = 0;
  while (shared < head.size() && shared < whole.size() && head[shared] == whole[shared]) ++shared;
  for (size_t i = 0; i < whole.size(); ++i) Push(whole[i], i >= shared && content_trained, ids, trained);
}

void ChatRenderer::Render(const std::vector<ChatMessage>& messages, const std::string& where,
                          std::vector<uint32_t>* ids, std::vector<uint8_t>* trained) const {
  if (std::none_of(messages.begin(), messages.end(),
                   [](const ChatMessage& m) { return m.role == Role::kAssistant; })) {
    throw UserError(where + ": has no assistant turn: nothing to train");
  }
  switch (format_) {
    case ChatFormat::kLlama3: RenderLlama3(messages, ids, trained); break;
    case ChatFormat::kChatMl: RenderChatMl(messages, ids, trained); break;
    case ChatFormat::kMistral: RenderMistral(messages, where, ids, trained); break;
  }
}

void ChatRenderer::RenderLlama3(const std::vector<ChatMessage>& messages, std::vector<uint32_t>* ids,
                                std::vector<uint8_t>* trained) const {
  Push(begin_, false, ids, trained);
  for (const ChatMessage& m : messages) {
    const bool answer = m.role == Role::kAssistant;
    Push(header_start_, false, ids, trained);
    AppendSpan(RoleName(m.role), "", false, ids, trained);
    Push(header_end_, false, ids, trained);
    AppendSpan("\n\n", Trim(m.content), answer, ids, trained);
    Push(end_, answer, ids, trained);
  }
}

void ChatRenderer::RenderChatMl(const std::vector<ChatMessage>& messages, std::vector<uint32_t>* ids,
                                std::vector<uint8_t>* trained) const {
  for (const ChatMessage& m : messages) {
    const bool answer = m.role == Role::kAssistant;
    Push(header_start_, false, ids, trained);
    AppendSpan(std::string(RoleName(m.role)) + "\n", m.content, answer, ids, trained);
    Push(end_, answer, ids, trained);
    AppendSpan("\n", "", false, ids, trained);
  }
}

void ChatRenderer::RenderMistral(const std::vector<ChatMessage>& messages, const std::string& where,
                                 std::vector<uint32_t>* ids, std::vector<uint8_t>* trained) const {
  size_t first = 0;
  std::string system;
  if (!messages.empty() && messages[0].role == Role::kSystem) {
    system = messages[0].content;
    first = 1;
  }
  size_t last_user = first;
  for (size_t i = first; i < messages.size(); ++i) {
    const Role expected = (i - first) % 2 == 0 ? Role::kUser : Role::kAssistant;
    if (messages[i].role != expected) {
      throw UserError(where + ": message " + std::to_string(i + 1) + " is " + RoleName(messages[i].role) +
                      ", where the mistral format needs " + RoleName(expected) +
                      ": after one optional first system message, turns must alternate user, assistant, user, ...");
    }
    if (expected == Role::kUser) last_user = i;
  }
  // v1 prepends the system message to the first user turn, v2/v3 to the last one.
  const size_t system_turn = inst_ ? last_user : first;
  Push(begin_, false, ids, trained);
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == Role::kAssistant) {
      AppendSpan("", m.content, true, ids, trained);
      Push(end_, true, ids, trained);
      continue;
    }
    const std::string text = (i == system_turn && first == 1 ? system + "\n\n" : "") + m.content;
    if (inst_) {
      Push(*inst_, false, ids, trained);
      AppendSpan(text, "", false, ids, trained);
      Push(*inst_end_, false, ids, trained);
    } else {
      AppendSpan("[INST] " + text + " [/INST]", "", false, ids, trained);
    }
  }
}

}  // namespace llmplan::data
