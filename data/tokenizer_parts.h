// Pieces the tokenizer loaders share (tokenizer.cc, hf_tokenizer.cc,
// sentencepiece_tokenizer.cc); not for use outside data/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace llmplan::data::internal {

// Tokens matched in the text as a whole before anything else (Hugging Face's
// added tokens, SentencePiece's user-defined pieces): leftmost match first,
// the longest one at a position.
struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool lstrip = false;       // the match takes the whitespace before it
  bool rstrip = false;       // ... and after it
  bool single_word = false;  // matches only when no word character touches it
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  // A part of the text: a token (id) or text between tokens.
  struct Segment {
    size_t begin;
    size_t end;
    bool is_token;
    uint32_t id;
  };
  // Splits `text` into segments, in order, covering it (whitespace taken by
  // lstrip/rstrip tokens belongs to the token's segment). Empty text
  // segments are left out.
  std::vector<Segment> Split(std::string_view text) const;
  // Whether some token contains `c`.
  bool AnyContains(char c) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<int> by_first_byte_[256];  // token indices, longest first
};

// The loaders. Each throws UserError naming `path` when the file is not what
// it should be.
std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& path, const std::string& text,
                                           const std::string& eot_token);
std::unique_ptr<Tokenizer> LoadSentencePiece(const std::string& path, const std::string& bytes,
                                             const std::string& eot_token);

// What every unsupported-kind message ends with.
inline constexpr const char* kSupported =
    "supported: Hugging Face tokenizer.json with a BPE model (byte-level like GPT-2, Llama 3, Qwen2, or "
    "SentencePiece-style like Mistral), or a SentencePiece BPE or unigram tokenizer.model (Llama 2, T5)";

}  // namespace llmplan::data::internal
