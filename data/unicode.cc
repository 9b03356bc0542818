#include "data/unicode.h"

#include <algorithm>
#include <cstddef>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "data/unicode_tables.h"

namespace llmplan::data::unicode {

namespace {

// Hangul syllables compose and decompose by arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t LookupRun(const CodepointRun* runs, int count, uint32_t cp) {
  // The last run whose start <= cp.
  const CodepointRun* end = runs + count;
  const CodepointRun* it = std::upper_bound(runs, end, cp, [](uint32_t v, const CodepointRun& r) { return v < r.start; });
  return it == runs ? 0 : (it - 1)->value;
}

// The tables, indexed for lookups: a direct array for the Basic Multilingual
// Plane's categories (what nearly all text is), hash maps for the rest.
struct Tables {
  uint8_t bmp_category[0x10000];
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> decomposition;
  std::unordered_map<uint64_t, uint32_t> composition;
  // Code points NFC may change or combine with what precedes them.
  std::unordered_set<uint32_t> nfc_maybe;

  Tables() {
    for (uint32_t cp = 0; cp < 0x10000; ++cp) {
      bmp_category[cp] = LookupRun(kCategoryRuns, kCategoryRunCount, cp);
    }
    decomposition.reserve(static_cast<size_t>(kDecompositionCount));
    for (int i = 0; i < kDecompositionCount; ++i) {
      const Decomposition& d = kDecompositions[i];
      decomposition.emplace(d.cp, std::make_pair(d.first, d.second));
      nfc_maybe.insert(d.cp);
    }
    for (int i = 0; i < kCompositionCount; ++i) {
      const Composition& c = kCompositions[i];
      composition.emplace((uint64_t{c.first} << 32) | c.second, c.composite);
      nfc_maybe.insert(c.second);
    }
    for (uint32_t cp = kVBase; cp < kVBase + kVCount; ++cp) nfc_maybe.insert(cp);
    for (uint32_t cp = kTBase + 1; cp < kTBase + kTCount; ++cp) nfc_maybe.insert(cp);
  }
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();  // never destroyed: used by worker threads until exit
  return *tables;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto& map = GetTables().decomposition;
  const auto it = map.find(cp);
  if (it == map.end()) {
    out->push_back(cp);
    return;
  }
  Decompose(it->second.first, out);
  if (it->second.second != 0) Decompose(it->second.second, out);
}

uint32_t Compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto& map = GetTables().composition;
  const auto it = map.find((uint64_t{first} << 32) | second);
  return it == map.end() ? 0 : it->second;
}

// NFC of a run of valid code points: full decomposition, canonical order,
// canonical composition.
void NfcRun(const std::vector<uint32_t>& cps, std::string* out) {
  std::vector<uint32_t> d;
  d.reserve(cps.size() + 8);
  for (uint32_t cp : cps) Decompose(cp, &d);
  // Canonical ordering: a stable sort of each run of non-starters by class.
  for (size_t i = 1; i < d.size(); ++i) {
    const uint8_t ccc = CombiningClass(d[i]);
    if (ccc == 0) continue;
    size_t j = i;
    while (j > 0 && CombiningClass(d[j - 1]) > ccc) {
      std::swap(d[j], d[j - 1]);
      --j;
    }
  }
  std::vector<uint32_t> composed;
  composed.reserve(d.size());
  std::ptrdiff_t starter = -1;
  for (uint32_t cp : d) {
    const uint8_t ccc = CombiningClass(cp);
    if (starter >= 0) {
      const bool adjacent = static_cast<size_t>(starter) + 1 == composed.size();
      const uint8_t last_ccc = adjacent ? 0 : CombiningClass(composed.back());
      const bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        const uint32_t c = Compose(composed[static_cast<size_t>(starter)], cp);
        if (c != 0) {
          composed[static_cast<size_t>(starter)] = c;
          continue;
        }
      }
    }
    if (ccc == 0) starter = static_cast<std::ptrdiff_t>(composed.size());
    composed.push_back(cp);
  }
  for (uint32_t cp : composed) AppendUtf8(cp, out);
}

}  // namespace

uint32_t DecodeUtf8(std::string_view text, size_t pos, int* length) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const size_t left = text.size() - pos;
  const unsigned char b0 = s[0];
  *length = 1;
  if (b0 < 0x80) return b0;
  int n;
  uint32_t cp;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return kInvalid;
  }
  if (left < static_cast<size_t>(n)) return kInvalid;
  for (int i = 1; i < n; ++i) {
    if ((s[i] & 0xC0) != 0x80) return kInvalid;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kInvalid;
  *length = n;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

GeneralCategory Category(uint32_t cp) {
  if (cp < 0x10000) return static_cast<GeneralCategory>(GetTables().bmp_category[cp]);
  if (cp == kInvalid) return kCn;
  return static_cast<GeneralCategory>(LookupRun(kCategoryRuns, kCategoryRunCount, cp));
}

bool IsWhiteSpace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint8_t CombiningClass(uint32_t cp) {
  if (cp < 0x300 || cp == kInvalid) return 0;
  return LookupRun(kCombiningClassRuns, kCombiningClassRunCount, cp);
}

std::string Nfc(std::string_view text) {
  const Tables& tables = GetTables();
  // Quick check: below U+0300 nothing decomposes differently or combines
  // backwards; above it, only the code points in nfc_maybe or with a
  // combining class can change.
  bool unchanged = true;
  for (size_t pos = 0; pos < text.size() && unchanged;) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    int len;
    const uint32_t cp = DecodeUtf8(text, pos, &len);
    if (cp != kInvalid && cp >= 0x300 && (CombiningClass(cp) != 0 || tables.nfc_maybe.count(cp) != 0)) {
      unchanged = false;
    }
    pos += static_cast<size_t>(len);
  }
  if (unchanged) return std::string(text);
  // Invalid bytes split the text into runs; each run is normalised alone and
  // the bytes are copied through.
  std::string out;
  out.reserve(text.size() + 16);
  std::vector<uint32_t> run;
  for (size_t pos = 0; pos < text.size();) {
    int len;
    const uint32_t cp = DecodeUtf8(text, pos, &len);
    if (cp == kInvalid) {
      NfcRun(run, &out);
      run.clear();
      out.push_back(text[pos]);
    } else {
      run.push_back(cp);
    }
    pos += static_cast<size_t>(len);
  }
  NfcRun(run, &out);
  return out;
}

const char* Version() { return kUnicodeVersion; }

}  // namespace llmplan::data::unicode
