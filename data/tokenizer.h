// Tokenizer: text to token ids for `llmplan data prepare`, with the ids the
// model's own tokenizer gives.
//
//   LoadTokenizer(path) reads
//     - a Hugging Face tokenizer.json with a BPE model: byte-level (GPT-2,
//       Llama 3, Qwen2: ByteLevel and/or Split pre-tokenizers with the
//       model's regex, NFC) or SentencePiece-style (Mistral, Llama 2
//       conversions: Prepend/Replace normalizers or Metaspace, byte_fallback);
//       added tokens are matched in the text first and never split;
//     - a SentencePiece tokenizer.model: BPE (Llama 2, Mistral: merges in
//       score order) or unigram (T5-style: Viterbi), byte fallback, dummy
//       prefix, precompiled character maps (nmt_nfkc), extra-whitespace
//       removal.
//   ByteTokenizer() is the byte-level tokenizer llmplan had before: id = byte,
//   256 = end of text.
//
// Ids match the reference implementations (Hugging Face tokenizers'
// encode(text, add_special_tokens=False); sentencepiece's EncodeAsIds) on
// the fixtures in tests/data/tokenizers.
//
// Documents: `llmplan data prepare` writes [bos] ids(document) eot for each
// document. eot is the tokenizer's end-of-text token (<|end_of_text|> for
// Llama 3, <|endoftext|> for GPT-2 and Qwen2, </s> / the model's eos id for
// SentencePiece models) so that the model learns where a document stops and
// training samples that span two documents see the boundary. bos is written
// only when the tokenizer itself adds one at the start of every encoded text
// (a post-processor that prepends a special token, e.g. Llama 2's <s>, later
// Llama 3 files' <|begin_of_text|>; for a tokenizer.model, a bos id >= 0):
// the model then sees at training what it will see at inference.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmplan::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` (UTF-8; invalid bytes are encoded too: byte-level
  // models code every byte, SentencePiece-style ones fall back to byte tokens
  // or unk). `document_start`: the text starts a document; false for the
  // continuation of one split at a line start (see line_splittable()), which
  // gets no dummy prefix. Thread-safe.
  virtual void Encode(std::string_view text, bool document_start, std::vector<uint32_t>* ids) const = 0;

  // The text of `ids` (added tokens as their content). For round trips:
  // Decode(Encode(text)) == text for the tokenizers supported here (NFC text,
  // and for SentencePiece models text in their alphabet or with byte fallback).
  virtual std::string Decode(const std::vector<uint32_t>& ids) const = 0;

  // The id of the added or special token whose text is exactly `text`
  // (<|eot_id|>, <|im_start|>, <s>, [INST]), or nullopt when there is none:
  // a tokenizer.json's added_tokens, a SentencePiece model's control and
  // user-defined pieces. Chat formats (chat_format.h) write these ids
  // themselves rather than trusting text to produce them.
  virtual std::optional<uint32_t> SpecialTokenId(std::string_view text) const {
    (void)text;
    return std::nullopt;
  }

  // One past the largest id Encode can produce or the tokenizer defines.
  int64_t vocab_size() const { return vocab_size_; }
  // Written after every document.
  uint32_t end_of_text() const { return end_of_text_; }
  // Written before every document when the tokenizer adds one (see above).
  std::optional<uint32_t> begin_of_text() const { return begin_of_text_; }
  // What it is, for messages: "Hugging Face BPE (byte-level), vocab 128256".
  const std::string& description() const { return description_; }
  // Whether a document may be encoded in pieces split just before a line
  // that starts with an ASCII letter (after '\n'), with the same ids as in
  // one piece: true when no token, pre-tokenizer match or merge can span
  // such a boundary. Large documents are split there to be encoded in
  // parallel and in bounded memory.
  bool line_splittable() const { return line_splittable_; }

 protected:
  int64_t vocab_size_ = 0;
  uint32_t end_of_text_ = 0;
  std::optional<uint32_t> begin_of_text_;
  std::string description_;
  bool line_splittable_ = false;
};

// Loads a tokenizer.json (text starting with '{') or a SentencePiece .model
// (anything else). `eot_token`: the end-of-text token's text, overriding the
// default choice (empty: <|end_of_text|>, <|endoftext|>, </s>, <eos>, ... the
// first the vocabulary has; for a .model, its eos id).
// Throws UserError naming the file and what is supported when the file is
// missing, not a tokenizer, corrupt, or of an unsupported kind (tokenizer.json
// WordPiece, Unigram, WordLevel models; normalizers other than NFC, Prepend,
// Replace, Strip; SentencePiece word/char models; ...).
std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path, const std::string& eot_token = "");

// The byte-level tokenizer: id = byte value, 256 = end of text, vocab 257.
std::unique_ptr<Tokenizer> ByteTokenizer();

}  // namespace llmplan::data
