// BpeModel: byte-pair encoding of one pre-tokenized word, shared by the
// tokenizer.json and SentencePiece loaders (tokenizer.cc).
//
// A word starts as its symbols (bytes for byte-level models, UTF-8 characters
// otherwise), each looked up in the vocabulary; then the adjacent pair with the
// lowest merge rank is merged, the leftmost first among equal ranks, until no
// pair has a merge. This is Hugging Face's BPE (ranks = order in "merges") and
// SentencePiece's (rank = order of the merged piece's score, equal scores
// equal ranks, so ties go to the leftmost pair as there).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llmplan::data {

// Hash for unordered maps keyed by std::string that are searched with a
// string_view, without building a std::string per lookup.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  bool byte_level = false;     // symbols are bytes, vocabulary keys raw bytes
  bool byte_fallback = false;  // a character missing from the vocabulary becomes <0xNN> tokens
  bool fuse_unk = false;       // consecutive unknown characters become one unk
  bool ignore_merges = false;  // a word that is itself in the vocabulary is that token (Llama 3)
  std::optional<uint32_t> unk;  // else unknown characters are dropped, as Hugging Face does
};

class BpeModel {
 public:
  explicit BpeModel(BpeOptions options) : options_(options) {}

  // Building. REQUIRES: called before Finish(); ids < 2^31.
  void AddToken(const std::string& bytes, uint32_t id);
  // Merging left + right gives `merged`; lower ranks merge first. A pair
  // given twice keeps its first (lowest) rank.
  void AddMerge(uint32_t left, uint32_t right, uint32_t rank, uint32_t merged);
  // REQUIRES: all tokens and merges added.
  void Finish();

  // Appends the ids of `word`. Thread-safe (a per-thread cache of recent words).
  void EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const;

  std::optional<uint32_t> Find(std::string_view bytes) const;
  // The bytes of token `id`, or nullptr when no token has that id.
  const std::string* TokenBytes(uint32_t id) const;
  const StringMap& vocab() const { return vocab_; }
  size_t merge_count() const { return merge_count_; }
  const BpeOptions& options() const { return options_; }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t merged;
  };
  void EncodeUncached(std::string_view word, std::vector<uint32_t>* ids) const;

  // Open addressing over (left << 32 | right) keys, linear probing, at most
  // half full: a lookup is one memory access where a node-based map costs
  // two or three, and merges are looked up for every pair of every new word.
  struct MergeSlot {
    uint64_t key = kEmptyKey;
    Merge merge{0, 0};
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  const Merge* FindMerge(uint32_t left, uint32_t right) const;

  BpeOptions options_;
  StringMap vocab_;
  std::vector<const std::string*> id_to_bytes_;  // into vocab_'s keys
  std::unordered_map<uint64_t, Merge> merges_;    // while building; then in merge_table_
  std::vector<MergeSlot> merge_table_;
  uint64_t merge_mask_ = 0;
  size_t merge_count_ = 0;
  int64_t byte_ids_[256];                         // byte-level: the byte's token; else <0xNN>; -1 when none
};

}  // namespace llmplan::data
