// The Unicode facts the tokenizers need, generated into unicode_tables.cc by
// tools/gen_unicode_tables.py (from Python's unicodedata): general categories
// for the pre-tokenizer regexes, and what NFC needs (combining classes,
// canonical decompositions, primary composites). Use them through unicode.h.
#pragma once

#include <cstdint>

namespace llmplan::data::unicode {

// A run of code points sharing one value: [start, next run's start).
struct CodepointRun {
  uint32_t start;
  uint8_t value;
};

// A canonical decomposition: cp -> first (+ second, 0 when a singleton).
struct Decomposition {
  uint32_t cp;
  uint32_t first;
  uint32_t second;
};

// A primary composite: first + second -> composite. Sorted by (first, second).
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

extern const char kUnicodeVersion[];
// General category index (see GeneralCategory in unicode.h), sorted by start.
extern const CodepointRun kCategoryRuns[];
extern const int kCategoryRunCount;
extern const CodepointRun kCombiningClassRuns[];
extern const int kCombiningClassRunCount;
extern const Decomposition kDecompositions[];  // sorted by cp
extern const int kDecompositionCount;
extern const Composition kCompositions[];
extern const int kCompositionCount;

}  // namespace llmplan::data::unicode
