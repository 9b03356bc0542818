#include "data/tokenizer.h"

#include <algorithm>

#include "base/json_read.h"
#include "base/user_error.h"
#include "data/tokenizer_parts.h"
#include "data/unicode.h"

namespace llmplan::data {

namespace internal {

namespace {

bool IsSpaceByte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// A letter, number or '_' right before `pos` (before: true) or at it.
bool WordCharAt(std::string_view text, size_t pos, bool before) {
  if (before) {
    if (pos == 0) return false;
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    pos = start;
  } else if (pos >= text.size()) {
    return false;
  }
  int len;
  const uint32_t cp = unicode::DecodeUtf8(text, pos, &len);
  return cp == '_' || unicode::IsLetter(cp) || unicode::IsNumber(cp);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(static_cast<int>(i));
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
      return tokens_[static_cast<size_t>(a)].content.size() > tokens_[static_cast<size_t>(b)].content.size();
    });
  }
}

bool AddedTokenMatcher::AnyContains(char c) const {
  for (const AddedToken& t : tokens_) {
    if (t.content.find(c) != std::string::npos) return true;
  }
  return false;
}

std::vector<AddedTokenMatcher::Segment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<Segment> out;
  size_t text_start = 0;  // start of the pending text segment
  for (size_t pos = 0; pos < text.size(); ++pos) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[pos])];
    if (candidates.empty()) continue;
    for (int index : candidates) {
      const AddedToken& t = tokens_[static_cast<size_t>(index)];
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      size_t end = pos + t.content.size();
      if (t.single_word && (WordCharAt(text, pos, true) || WordCharAt(text, end, false))) continue;
      size_t begin = pos;
      if (t.lstrip) {
        while (begin > text_start && IsSpaceByte(text[begin - 1])) --begin;
      }
      if (t.rstrip) {
        while (end < text.size() && IsSpaceByte(text[end])) ++end;
      }
      if (begin > text_start) out.push_back({text_start, begin, false, 0});
      out.push_back({begin, end, true, t.id});
      text_start = end;
      pos = end - 1;  // the loop's ++pos continues after the token
      break;
    }
  }
  if (text_start < text.size()) out.push_back({text_start, text.size(), false, 0});
  return out;
}

}  // namespace internal

namespace {

class Bytes final : public Tokenizer {
 public:
  Bytes() {
    vocab_size_ = 257;
    end_of_text_ = 256;
    description_ = "byte-level vocab 257";
    line_splittable_ = true;
  }
  void Encode(std::string_view text, bool, std::vector<uint32_t>* ids) const override {
    for (char c : text) ids->push_back(static_cast<unsigned char>(c));
  }
  std::string Decode(const std::vector<uint32_t>& ids) const override {
    std::string out;
    for (uint32_t id : ids) {
      if (id < 256) out.push_back(static_cast<char>(id));
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> ByteTokenizer() { return std::make_unique<Bytes>(); }

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path, const std::string& eot_token) {
  // The largest real tokenizer files are tens of MiB (Gemma 3's tokenizer.json: 33 MiB).
  const std::string bytes = ReadInputFile(path, "tokenizer", kMaxJsonFileBytes);
  size_t first = 0;
  while (first < bytes.size() && (bytes[first] == ' ' || bytes[first] == '\n' || bytes[first] == '\r' || bytes[first] == '\t')) {
    ++first;
  }
  if (first < bytes.size() && bytes[first] == '{') return internal::LoadHfTokenizer(path, bytes, eot_token);
  return internal::LoadSentencePiece(path, bytes, eot_token);
}

}  // namespace llmplan::data
