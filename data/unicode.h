// Unicode for the tokenizers: UTF-8 decoding that never fails, general
// categories (\p{L}, \p{N}, ... in pre-tokenizer regexes), the White_Space
// property (\s) and NFC. Tables are generated from Python's unicodedata
// (tools/gen_unicode_tables.py); no ICU, no PCRE2, so the planner binary keeps
// its short dependency list and the GPU machine builds it as it is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace llmplan::data::unicode {

// General categories, in the order of the generated tables.
enum GeneralCategory : uint8_t {
  kLu, kLl, kLt, kLm, kLo, kMn, kMc, kMe, kNd, kNl, kNo, kPc, kPd, kPs, kPe, kPi,
  kPf, kPo, kSm, kSc, kSk, kSo, kZs, kZl, kZp, kCc, kCf, kCs, kCo, kCn,
  kCategoryCount
};

// A code point decoded from UTF-8 text that may not be valid: a byte that
// starts no valid sequence decodes as kInvalid with length 1, so every byte
// of the input belongs to exactly one decoded unit (byte-level tokenizers
// still see every byte).
inline constexpr uint32_t kInvalid = 0xFFFFFFFF;

// Decodes the code point at text[pos]. REQUIRES: pos < text.size().
// Sets *length to the bytes it spans (1..4). Overlong forms, surrogates and
// code points past U+10FFFF are invalid.
uint32_t DecodeUtf8(std::string_view text, size_t pos, int* length);

// Appends cp as UTF-8. REQUIRES: cp <= 0x10FFFF.
void AppendUtf8(uint32_t cp, std::string* out);

// General category of cp; kCn for kInvalid.
GeneralCategory Category(uint32_t cp);
inline bool IsLetter(uint32_t cp) { return Category(cp) <= kLo; }
inline bool IsNumber(uint32_t cp) {
  const GeneralCategory c = Category(cp);
  return c >= kNd && c <= kNo;
}
// The White_Space property: what \s matches in Oniguruma (Hugging Face
// tokenizers' regex engine) and Python's `regex`.
bool IsWhiteSpace(uint32_t cp);

// Canonical combining class (0 for starters and kInvalid).
uint8_t CombiningClass(uint32_t cp);

// Canonical composition (NFC) of UTF-8 text. Invalid bytes pass through
// unchanged. Text that NFC leaves alone (all of ASCII, and most text) is
// recognised in one pass and returned as is.
std::string Nfc(std::string_view text);

// The Unicode version of the tables.
const char* Version();

}  // namespace llmplan::data::unicode
