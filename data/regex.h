// Regex: a small backtracking regex engine for the pre-tokenizer patterns of
// Hugging Face tokenizer.json files (GPT-2's, Llama 3's, Qwen2's, GPT-4o's),
// with the leftmost-first semantics of Oniguruma, the engine Hugging Face's
// tokenizers run them with. Written here rather than taken from PCRE2 so that
// the planner binary needs no new library (the GPU machine has no package
// registry) and so that text which is not valid UTF-8 still tokenizes.
//
// Syntax: literals; escapes \r \n \t \f \v \xHH \x{H...} \uHHHH and escaped
// punctuation; classes [...] and [^...] with ranges; \s \S (White_Space),
// \d \D (Nd), \w \W (letters, marks, Nd, Pc); \p{..} \P{..} with a general
// category (L, Lu, Ll, Lt, Lm, Lo, M, Mn, Mc, Me, N, Nd, Nl, No, P.., S.., Z..,
// C..); '.' (anything but \n); groups (...), (?:...), (?i:...) (ASCII case
// folding, plus the Unicode folds of s and k), lookahead (?=...) (?!...),
// atomic groups (?>...); quantifiers ? * + {n} {n,} {n,m}, lazy (??, *?, ...)
// and possessive (?+, *+, ++). Not supported (a UserError says so): anchors,
// backreferences, lookbehind, other inline flags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llmplan::data {

class Regex {
 public:
  // Compiles `pattern`. Throws UserError("<what>: regex '<pattern>' ...: <why>")
  // when it uses syntax outside the subset above, or a repetition whose body
  // can match the empty string.
  Regex(std::string_view pattern, const std::string& what);

  // Finds the leftmost match in text[from..) (UTF-8; a byte that starts no
  // valid sequence is one unit of its own, unicode::kInvalid, which only
  // negated classes match). `from` must be at a unit boundary. Empty matches
  // are skipped. Returns false when there is none; else sets [*begin, *end),
  // byte offsets. Thread-safe. Throws UserError when one match attempt takes
  // more than 2^24 backtracking steps (only a pattern that backtracks
  // exponentially does; real ones take a few per byte).
  bool Find(std::string_view text, size_t from, size_t* begin, size_t* end) const;

  // The length in bytes of the match starting at text[0], if any. For tests.
  bool MatchesPrefix(std::string_view text, size_t* match_bytes) const;

 private:
  enum class Op : uint8_t { kChar, kClass, kAny, kSplit, kJmp, kMatch, kLook, kAtomic };
  struct Inst {
    Op op;
    bool flag = false;  // kChar: case-insensitive; kLook: negative
    uint32_t c = 0;     // kChar: code point; kClass: class index
    int x = 0;          // kSplit: preferred branch; kJmp: target; kLook/kAtomic: sub-program
    int y = 0;          // kSplit: other branch
  };
  struct CharClass {
    bool negated = false;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    uint32_t categories = 0;      // bit per unicode::GeneralCategory
    uint32_t not_categories = 0;  // from \P{..}: matches when outside these
    bool space = false, not_space = false, digit = false, not_digit = false, word = false, not_word = false;
    uint64_t ascii[2] = {0, 0};   // precomputed answer for code points < 128
    bool MatchesSlow(uint32_t cp) const;
    bool Matches(uint32_t cp) const {
      if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
      return MatchesSlow(cp);
    }
  };
  struct Node;
  class Parser;

  // Code points a match can start with, as far as the first unit tells:
  // exact for ASCII, "maybe" for everything else.
  struct FirstSet {
    uint64_t ascii[2] = {0, 0};
    bool other = false;
    bool empty = false;  // can match the empty string (then anything may follow)
    bool Allows(uint32_t cp) const {
      return empty || (cp < 128 ? ((ascii[cp >> 6] >> (cp & 63)) & 1) != 0 : other);
    }
  };
  // One alternative of the top-level alternation: tried in order, each as a
  // program of its own, skipped when its first set rules the unit out.
  struct Branch {
    int pc;
    FirstSet first;
  };

  int Emit(Inst inst);
  void Compile(const Node& node);
  FirstSet First(const Node& node) const;
  bool Run(int pc, std::string_view text, size_t pos, size_t* end) const;

  static constexpr size_t kMaxProgram = 1 << 20;
  static constexpr int64_t kMaxSteps = int64_t{1} << 24;

  std::string what_;  // for errors
  std::vector<Inst> program_;
  std::vector<CharClass> classes_;
  std::vector<Branch> branches_;
};

}  // namespace llmplan::data
