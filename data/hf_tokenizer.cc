// Hugging Face tokenizer.json with a BPE model: the pipeline of Hugging Face's
// tokenizers library, step by step, for the components LLM tokenizers use:
//   added tokens (matched in the raw text, never split)
//   -> normalizer (NFC, Prepend, Replace, Strip, Sequence)
//   -> pre-tokenizer (Split with a regex or string, ByteLevel, Metaspace,
//      Digits, Sequence)
//   -> BPE model (merges by rank; byte_fallback, fuse_unk, ignore_merges).
// Byte-level models (a ByteLevel pre-tokenizer) work on raw bytes here: the
// vocabulary's GPT-2 characters are mapped back to the bytes they stand for
// once at load, instead of mapping every byte of the text at encode time.
#include <algorithm>
#include <array>
#include <cctype>
#include <deque>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/json_read.h"
#include "base/user_error.h"
#include "data/bpe.h"
#include "data/regex.h"
#include "data/tokenizer_parts.h"
#include "data/unicode.h"

namespace llmplan::data::internal {

namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer regex, used by ByteLevel(use_regex = true).
constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// GPT-2's byte-to-character map: printable bytes stand for themselves, the
// others for U+0100 onwards in byte order.
std::array<uint32_t, 256> ByteToChar() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[static_cast<size_t>(b)] = printable ? static_cast<uint32_t>(b) : next++;
  }
  return map;
}

// The bytes a byte-level token string stands for; false when it has a
// character outside GPT-2's alphabet (such a token cannot come out of BPE).
bool ByteLevelToBytes(const std::string& token, std::string* out) {
  static const std::unordered_map<uint32_t, char> inverse = [] {
    std::unordered_map<uint32_t, char> m;
    const auto forward = ByteToChar();
    for (int b = 0; b < 256; ++b) m[forward[static_cast<size_t>(b)]] = static_cast<char>(b);
    return m;
  }();
  out->clear();
  for (size_t pos = 0; pos < token.size();) {
    int len;
    const uint32_t cp = unicode::DecodeUtf8(token, pos, &len);
    const auto it = inverse.find(cp);
    if (it == inverse.end()) return false;
    out->push_back(it->second);
    pos += static_cast<size_t>(len);
  }
  return true;
}

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class Prepend { kAlways, kFirst, kNever };

struct NormalizerStep {
  enum Kind { kNfc, kPrepend, kReplace, kStrip } kind = kNfc;
  std::string text;     // kPrepend: what; kReplace: the literal pattern
  std::string content;  // kReplace: the replacement
  std::shared_ptr<Regex> regex;  // kReplace with a regex pattern
  bool left = false, right = false;  // kStrip
};

struct PreTokenizerStep {
  enum Kind { kSplit, kByteLevel, kMetaspace, kDigits } kind = kSplit;
  std::shared_ptr<Regex> regex;  // kSplit (regex pattern), kByteLevel (use_regex)
  std::string literal;           // kSplit with a string pattern
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement;        // kMetaspace
  Prepend prepend = Prepend::kAlways;
  bool split = true;              // kMetaspace
  bool individual_digits = false;  // kDigits
};

// Spans of `piece` that a pre-tokenizer's pattern matches.
std::vector<std::pair<size_t, size_t>> FindMatches(std::string_view piece, const PreTokenizerStep& step) {
  std::vector<std::pair<size_t, size_t>> matches;
  if (step.regex) {
    size_t from = 0, b, e;
    while (step.regex->Find(piece, from, &b, &e)) {
      matches.emplace_back(b, e);
      from = e;
    }
  } else if (step.kind == PreTokenizerStep::kDigits) {
    for (size_t pos = 0; pos < piece.size();) {
      int len;
      const uint32_t cp = unicode::DecodeUtf8(piece, pos, &len);
      if (unicode::IsNumber(cp)) matches.emplace_back(pos, pos + static_cast<size_t>(len));
      pos += static_cast<size_t>(len);
    }
  } else if (!step.literal.empty()) {
    for (size_t pos = piece.find(step.literal); pos != std::string::npos;
         pos = piece.find(step.literal, pos + step.literal.size())) {
      matches.emplace_back(pos, pos + step.literal.size());
    }
  }
  return matches;
}

// Splits `piece` at the matches as `behavior` says (Hugging Face's
// SplitDelimiterBehavior), appending the non-empty parts to `out`. Every
// part is a substring of the piece (merges join neighbours).
void SplitPiece(std::string_view piece, const std::vector<std::pair<size_t, size_t>>& matches, Behavior behavior,
                bool invert, std::vector<std::string_view>* out) {
  struct Span {
    size_t b, e;
    bool match;
  };
  std::vector<Span> spans;
  spans.reserve(2 * matches.size() + 1);
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    if (b > last) spans.push_back({last, b, invert});
    spans.push_back({b, e, !invert});
    last = e;
  }
  if (last < piece.size()) spans.push_back({last, piece.size(), invert});
  const size_t first_part = out->size();
  auto extend_last = [&](const Span& s) {
    std::string_view& back = out->back();
    back = std::string_view(back.data(), static_cast<size_t>(piece.data() + s.e - back.data()));
  };
  bool pending_next = false;  // kMergedWithNext: the last part waits for what follows
  bool last_was_match = false;
  for (const Span& s : spans) {
    const std::string_view text = piece.substr(s.b, s.e - s.b);
    const bool have_part = out->size() > first_part;
    switch (behavior) {
      case Behavior::kIsolated:
        out->push_back(text);
        break;
      case Behavior::kRemoved:
        if (!s.match) out->push_back(text);
        break;
      case Behavior::kMergedWithPrevious:
        if (s.match && have_part) {
          extend_last(s);
        } else {
          out->push_back(text);
        }
        break;
      case Behavior::kMergedWithNext:
        if (pending_next && have_part) {
          extend_last(s);
        } else {
          out->push_back(text);
        }
        pending_next = s.match;
        break;
      case Behavior::kContiguous:
        if (s.match && last_was_match && have_part) {
          extend_last(s);
        } else {
          out->push_back(text);
        }
        break;
    }
    last_was_match = s.match;
  }
}

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t last = 0;
  for (size_t pos = s->find(from); pos != std::string::npos; pos = s->find(from, last)) {
    out.append(*s, last, pos - last);
    out += to;
    last = pos + from.size();
  }
  if (last == 0) return;
  out.append(*s, last, std::string::npos);
  *s = std::move(out);
}

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const std::string& path, const json& root, const std::string& eot_token);

  void Encode(std::string_view text, bool document_start, std::vector<uint32_t>* ids) const override;
  std::string Decode(const std::vector<uint32_t>& ids) const override;
  std::optional<uint32_t> SpecialTokenId(std::string_view text) const override {
    for (const AddedToken& t : added_) {
      if (t.content == text) return t.id;
    }
    return std::nullopt;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const { throw UserError(context_ + ": " + what); }
  const json& Field(const json& object, const char* key, const char* where) const;
  std::string StringField(const json& object, const char* key, const char* where) const;
  bool BoolField(const json& object, const char* key, bool fallback) const;
  std::shared_ptr<Regex> Pattern(const json& pattern, std::string* literal, const char* where) const;

  void ParseAddedTokens(const json& root);
  void ParseNormalizer(const json& j);
  void ParsePreTokenizer(const json& j);
  void ParseModel(const json& model);
  void ParseDecoder(const json& j);
  void ParsePostProcessor(const json& j);
  void ChooseEndOfText(const std::string& path, const std::string& eot_token);
  std::optional<uint32_t> TokenId(const std::string& text) const;
  bool ProbeLineBoundaries() const;

  std::string Normalize(std::string_view text, bool prepend) const;
  // Pre-tokenizes one normalized segment. `text_start`: it starts the
  // document (Metaspace's prepend_scheme "first"); `prefix`: its first piece
  // may get a prefix space (false for the continuation of a document split
  // at a line start, where the whole document has none).
  void PreTokenize(std::string_view text, bool text_start, bool prefix, std::vector<std::string_view>* pieces,
                   std::deque<std::string>* arena) const;
  void EncodeSegment(std::string_view text, bool text_start, bool prepend, std::vector<uint32_t>* ids) const;

  std::string context_;
  std::vector<AddedToken> added_;
  std::unordered_map<uint32_t, std::string> added_content_;
  AddedTokenMatcher raw_matcher_;   // added tokens with normalized = false
  AddedTokenMatcher norm_matcher_;  // added tokens with normalized = true
  std::vector<NormalizerStep> normalizers_;
  std::vector<PreTokenizerStep> pre_tokenizers_;
  bool byte_level_ = false;
  std::unique_ptr<BpeModel> model_;
  // SentencePiece-style models that see a whole segment as one word: split it
  // before each U+2581 that follows another character, when no token spans
  // such a place (the ids are the same, and words repeat for the cache).
  bool split_before_metaspace_ = false;
  // Decoding.
  bool decode_metaspace_ = false;   // U+2581 -> ' '
  bool decode_byte_fallback_ = false;
  int decode_strip_spaces_ = 0;     // leading spaces removed
};

const json& HfTokenizer::Field(const json& object, const char* key, const char* where) const {
  if (!object.is_object() || !object.contains(key)) Fail(std::string(where) + " has no '" + key + "'");
  return object.at(key);
}

std::string HfTokenizer::StringField(const json& object, const char* key, const char* where) const {
  const json& v = Field(object, key, where);
  if (!v.is_string()) Fail(std::string(where) + ": '" + key + "' is not a string");
  return v.get<std::string>();
}

bool HfTokenizer::BoolField(const json& object, const char* key, bool fallback) const {
  if (!object.is_object() || !object.contains(key) || object.at(key).is_null()) return fallback;
  if (!object.at(key).is_boolean()) Fail(std::string("'") + key + "' is not true or false");
  return object.at(key).get<bool>();
}

std::shared_ptr<Regex> HfTokenizer::Pattern(const json& pattern, std::string* literal, const char* where) const {
  if (pattern.is_object() && pattern.contains("Regex") && pattern.at("Regex").is_string()) {
    return std::make_shared<Regex>(pattern.at("Regex").get<std::string>(), context_ + " " + where);
  }
  if (pattern.is_object() && pattern.contains("String") && pattern.at("String").is_string()) {
    *literal = pattern.at("String").get<std::string>();
    return nullptr;
  }
  if (pattern.is_string()) {
    *literal = pattern.get<std::string>();
    return nullptr;
  }
  Fail(std::string(where) + ": 'pattern' is neither {\"Regex\": ...} nor {\"String\": ...}");
}

HfTokenizer::HfTokenizer(const std::string& path, const json& root, const std::string& eot_token)
    : context_("tokenizer '" + path + "'") {
  if (!root.is_object()) Fail("not a tokenizer.json (expected a JSON object)");
  if (!root.contains("model")) Fail("not a tokenizer.json (no 'model')");
  ParseAddedTokens(root);
  if (root.contains("normalizer")) ParseNormalizer(root.at("normalizer"));
  if (root.contains("pre_tokenizer")) ParsePreTokenizer(root.at("pre_tokenizer"));
  if (root.contains("decoder")) ParseDecoder(root.at("decoder"));
  ParseModel(root.at("model"));
  if (root.contains("post_processor")) ParsePostProcessor(root.at("post_processor"));
  ChooseEndOfText(path, eot_token);

  int64_t max_id = -1;
  for (const auto& [bytes, id] : model_->vocab()) max_id = std::max<int64_t>(max_id, id);
  for (const AddedToken& t : added_) max_id = std::max<int64_t>(max_id, t.id);
  vocab_size_ = max_id + 1;
  description_ = std::string("Hugging Face BPE (") + (byte_level_ ? "byte-level" : "SentencePiece-style") +
                 "), vocab " + std::to_string(vocab_size_);

  // Line starts as split points: no added token and no normalizer may see
  // across a line end, and either the pre-tokenizer always splits there or no
  // token holds a newline followed by a letter.
  bool normalizers_local = true;
  for (const NormalizerStep& n : normalizers_) {
    if (n.kind == NormalizerStep::kStrip || n.regex || n.text.find('\n') != std::string::npos) {
      normalizers_local = false;
    }
  }
  bool token_spans_line = false;
  for (const auto& [bytes, id] : model_->vocab()) {
    for (size_t i = 0; i + 1 < bytes.size() && !token_spans_line; ++i) {
      const char c = bytes[i + 1];
      token_spans_line = bytes[i] == '\n' && ((c | 32) >= 'a' && (c | 32) <= 'z');
    }
  }
  line_splittable_ = !raw_matcher_.AnyContains('\n') && !norm_matcher_.AnyContains('\n') && normalizers_local &&
                     (!token_spans_line || ProbeLineBoundaries());
}

void HfTokenizer::ParseAddedTokens(const json& root) {
  if (!root.contains("added_tokens") || root.at("added_tokens").is_null()) return;
  const json& list = root.at("added_tokens");
  if (!list.is_array()) Fail("'added_tokens' is not a list");
  std::vector<AddedToken> raw, normalized;
  for (const json& t : list) {
    AddedToken token;
    token.content = StringField(t, "content", "an added token");
    const json& id = Field(t, "id", "an added token");
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (uint64_t{1} << 31)) {
      Fail("added token '" + token.content + "' has an id that is not a whole number below 2^31");
    }
    token.id = id.get<uint32_t>();
    token.lstrip = BoolField(t, "lstrip", false);
    token.rstrip = BoolField(t, "rstrip", false);
    token.single_word = BoolField(t, "single_word", false);
    if (token.content.empty()) Fail("an added token is empty");
    added_content_[token.id] = token.content;
    added_.push_back(token);
    (BoolField(t, "normalized", false) ? normalized : raw).push_back(token);
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw));
  norm_matcher_ = AddedTokenMatcher(std::move(normalized));
}

void HfTokenizer::ParseNormalizer(const json& j) {
  if (j.is_null()) return;
  const std::string type = StringField(j, "type", "the normalizer");
  if (type == "Sequence") {
    const json& list = Field(j, "normalizers", "the Sequence normalizer");
    if (!list.is_array()) Fail("the Sequence normalizer's 'normalizers' is not a list");
    for (const json& n : list) ParseNormalizer(n);
    return;
  }
  NormalizerStep step;
  if (type == "NFC") {
    step.kind = NormalizerStep::kNfc;
  } else if (type == "Prepend") {
    step.kind = NormalizerStep::kPrepend;
    step.text = StringField(j, "prepend", "the Prepend normalizer");
  } else if (type == "Replace") {
    step.kind = NormalizerStep::kReplace;
    step.regex = Pattern(Field(j, "pattern", "the Replace normalizer"), &step.text, "Replace normalizer");
    step.content = StringField(j, "content", "the Replace normalizer");
  } else if (type == "Strip") {
    step.kind = NormalizerStep::kStrip;
    step.left = BoolField(j, "strip_left", true);
    step.right = BoolField(j, "strip_right", true);
  } else {
    Fail("normalizer '" + type + "' is not supported (supported: NFC, Prepend, Replace, Strip, Sequence; " +
         kSupported + ")");
  }
  normalizers_.push_back(std::move(step));
}

void HfTokenizer::ParsePreTokenizer(const json& j) {
  if (j.is_null()) return;
  const std::string type = StringField(j, "type", "the pre-tokenizer");
  if (type == "Sequence") {
    const json& list = Field(j, "pretokenizers", "the Sequence pre-tokenizer");
    if (!list.is_array()) Fail("the Sequence pre-tokenizer's 'pretokenizers' is not a list");
    for (const json& p : list) ParsePreTokenizer(p);
    return;
  }
  PreTokenizerStep step;
  if (type == "Split") {
    step.kind = PreTokenizerStep::kSplit;
    step.regex = Pattern(Field(j, "pattern", "the Split pre-tokenizer"), &step.literal, "Split pre-tokenizer");
    const std::string behavior = j.contains("behavior") && j.at("behavior").is_string()
                                     ? j.at("behavior").get<std::string>()
                                     : "Isolated";
    if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      Fail("Split pre-tokenizer behavior '" + behavior + "' is unknown");
    }
    step.invert = BoolField(j, "invert", false);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::kByteLevel;
    step.add_prefix_space = BoolField(j, "add_prefix_space", true);
    if (BoolField(j, "use_regex", true)) step.regex = std::make_shared<Regex>(kGpt2Pattern, "GPT-2 pattern");
    byte_level_ = true;
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::kMetaspace;
    step.replacement = j.contains("replacement") && j.at("replacement").is_string()
                           ? j.at("replacement").get<std::string>()
                           : kMetaspace;
    if (j.contains("prepend_scheme") && j.at("prepend_scheme").is_string()) {
      const std::string scheme = j.at("prepend_scheme").get<std::string>();
      if (scheme == "always") {
        step.prepend = Prepend::kAlways;
      } else if (scheme == "first") {
        step.prepend = Prepend::kFirst;
      } else if (scheme == "never") {
        step.prepend = Prepend::kNever;
      } else {
        Fail("Metaspace prepend_scheme '" + scheme + "' is unknown");
      }
    } else {
      step.prepend = BoolField(j, "add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
    }
    step.split = BoolField(j, "split", true);
    step.literal = step.replacement;
    step.behavior = Behavior::kMergedWithNext;
  } else if (type == "Digits") {
    step.kind = PreTokenizerStep::kDigits;
    step.individual_digits = BoolField(j, "individual_digits", false);
    step.behavior = step.individual_digits ? Behavior::kIsolated : Behavior::kContiguous;
  } else {
    Fail("pre-tokenizer '" + type + "' is not supported (supported: Split, ByteLevel, Metaspace, Digits, Sequence; " +
         kSupported + ")");
  }
  pre_tokenizers_.push_back(std::move(step));
}

void HfTokenizer::ParseModel(const json& model) {
  if (!model.is_object()) Fail("'model' is not an object");
  const std::string type = model.contains("type") && model.at("type").is_string()
                               ? model.at("type").get<std::string>()
                               : (model.contains("merges") ? "BPE" : "unknown");
  if (type != "BPE") Fail("model type '" + type + "' is not supported (" + kSupported + ")");
  if (model.contains("dropout") && !model.at("dropout").is_null() &&
      !(model.at("dropout").is_number() && model.at("dropout").get<double>() == 0.0)) {
    Fail("BPE dropout is not supported: set \"dropout\" to null");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model.at(key).is_null() &&
        !(model.at(key).is_string() && model.at(key).get<std::string>().empty())) {
      Fail(std::string("BPE '") + key + "' is not supported (WordPiece-style BPE)");
    }
  }
  const json& vocab = Field(model, "vocab", "the BPE model");
  if (!vocab.is_object()) Fail("the BPE model's 'vocab' is not an object");
  std::unordered_map<std::string, uint32_t> by_text;  // the JSON's spelling
  by_text.reserve(vocab.size());
  for (const auto& [text, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (uint64_t{1} << 31)) {
      Fail("vocabulary token '" + text + "' has an id that is not a whole number below 2^31");
    }
    by_text.emplace(text, id.get<uint32_t>());
  }
  if (by_text.empty()) Fail("the BPE model's vocabulary is empty");

  BpeOptions options;
  options.byte_level = byte_level_;
  options.byte_fallback = BoolField(model, "byte_fallback", false);
  options.fuse_unk = BoolField(model, "fuse_unk", false);
  options.ignore_merges = BoolField(model, "ignore_merges", false);
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    const std::string unk = model.at("unk_token").get<std::string>();
    const auto it = by_text.find(unk);
    if (it == by_text.end()) Fail("unk_token '" + unk + "' is not in the vocabulary");
    options.unk = it->second;
  }
  model_ = std::make_unique<BpeModel>(options);
  std::string bytes;
  for (const auto& [text, id] : by_text) {
    if (byte_level_ && ByteLevelToBytes(text, &bytes)) {
      model_->AddToken(bytes, id);
    } else {
      model_->AddToken(text, id);
    }
  }

  const json& merges = Field(model, "merges", "the BPE model");
  if (!merges.is_array()) Fail("the BPE model's 'merges' is not a list");
  uint32_t rank = 0;
  for (const json& m : merges) {
    std::string left, right;
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        Fail("merge '" + line + "' is not two tokens separated by one space");
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      Fail("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto l = by_text.find(left), r = by_text.find(right), merged = by_text.find(left + right);
    if (l == by_text.end() || r == by_text.end() || merged == by_text.end()) {
      Fail("merge '" + left + " " + right + "' names a token that is not in the vocabulary");
    }
    model_->AddMerge(l->second, r->second, rank++, merged->second);
  }
  model_->Finish();

  if (!byte_level_) {
    // A token with U+2581 after some other character would span a word
    // boundary: then the whole segment must stay one word.
    bool spans = false;
    for (const auto& [k, id] : model_->vocab()) {
      for (size_t pos = k.find(kMetaspace); pos != std::string::npos && !spans; pos = k.find(kMetaspace, pos + 3)) {
        spans = pos > 0 && !(pos >= 3 && k.compare(pos - 3, 3, kMetaspace) == 0);
      }
      if (spans) break;
    }
    split_before_metaspace_ = !spans;
  }
}

void HfTokenizer::ParseDecoder(const json& j) {
  if (j.is_null() || !j.is_object()) return;
  const std::string type = j.contains("type") && j.at("type").is_string() ? j.at("type").get<std::string>() : "";
  if (type == "Sequence" && j.contains("decoders") && j.at("decoders").is_array()) {
    for (const json& d : j.at("decoders")) ParseDecoder(d);
  } else if (type == "Metaspace") {
    decode_metaspace_ = true;
    const bool prepends = j.contains("prepend_scheme") && j.at("prepend_scheme").is_string()
                              ? j.at("prepend_scheme").get<std::string>() != "never"
                              : BoolField(j, "add_prefix_space", true);
    if (prepends) decode_strip_spaces_ = 1;
  } else if (type == "Replace") {
    std::string literal;
    if (j.contains("pattern") && j.at("pattern").is_object() && j.at("pattern").contains("String")) {
      literal = j.at("pattern").at("String").is_string() ? j.at("pattern").at("String").get<std::string>() : "";
    }
    if (literal == kMetaspace) decode_metaspace_ = true;
  } else if (type == "ByteFallback") {
    decode_byte_fallback_ = true;
  } else if (type == "Strip") {
    if (j.contains("start") && j.at("start").is_number_unsigned()) {
      decode_strip_spaces_ = static_cast<int>(std::min<uint64_t>(j.at("start").get<uint64_t>(), 16));
    }
  }
}

void HfTokenizer::ParsePostProcessor(const json& j) {
  if (j.is_null() || !j.is_object()) return;
  const std::string type = j.contains("type") && j.at("type").is_string() ? j.at("type").get<std::string>() : "";
  if (type == "Sequence" && j.contains("processors") && j.at("processors").is_array()) {
    for (const json& p : j.at("processors")) ParsePostProcessor(p);
    return;
  }
  if (type != "TemplateProcessing" || !j.contains("single") || !j.at("single").is_array() || j.at("single").empty()) {
    return;
  }
  const json& first = j.at("single")[0];
  if (!first.is_object() || !first.contains("SpecialToken")) return;
  const json& special = first.at("SpecialToken");
  if (!special.is_object() || !special.contains("id") || !special.at("id").is_string()) return;
  const std::string name = special.at("id").get<std::string>();
  // The template names the token; "special_tokens" gives its id.
  if (j.contains("special_tokens") && j.at("special_tokens").is_object() && j.at("special_tokens").contains(name)) {
    const json& ids = j.at("special_tokens").at(name).contains("ids") ? j.at("special_tokens").at(name).at("ids") : json();
    if (ids.is_array() && ids.size() == 1 && ids[0].is_number_unsigned()) {
      begin_of_text_ = ids[0].get<uint32_t>();
      return;
    }
  }
  if (const auto id = TokenId(name)) begin_of_text_ = *id;
}

std::optional<uint32_t> HfTokenizer::TokenId(const std::string& text) const {
  for (const AddedToken& t : added_) {
    if (t.content == text) return t.id;
  }
  std::string bytes = text;
  if (byte_level_) ByteLevelToBytes(text, &bytes);
  return model_->Find(bytes);
}

void HfTokenizer::ChooseEndOfText(const std::string& path, const std::string& eot_token) {
  if (!eot_token.empty()) {
    const auto id = TokenId(eot_token);
    if (!id) Fail("has no token '" + eot_token + "' (given as --eot-token)");
    end_of_text_ = *id;
    return;
  }
  for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|eos|>", "<|end|>"}) {
    if (const auto id = TokenId(name)) {
      end_of_text_ = *id;
      return;
    }
  }
  // tokenizer_config.json beside it names the eos token.
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec)) {
    try {
      const json c = ReadJsonFile(config.string(), "tokenizer config");
      std::string eos;
      if (c.contains("eos_token") && c.at("eos_token").is_string()) eos = c.at("eos_token").get<std::string>();
      if (c.contains("eos_token") && c.at("eos_token").is_object() && c.at("eos_token").contains("content") &&
          c.at("eos_token").at("content").is_string()) {
        eos = c.at("eos_token").at("content").get<std::string>();
      }
      if (const auto id = eos.empty() ? std::nullopt : TokenId(eos)) {
        end_of_text_ = *id;
        return;
      }
    } catch (const UserError&) {
    }
  }
  Fail("names no end-of-text token (<|end_of_text|>, <|endoftext|>, </s>, <eos>): pass --eot-token TOKEN");
}

bool HfTokenizer::ProbeLineBoundaries() const {
  bool splits = false;
  for (const PreTokenizerStep& p : pre_tokenizers_) splits = splits || p.regex != nullptr;
  if (!splits) return false;
  for (const char* probe : {"x\nbc", "x \nbc", "x.\nbc", "x1\nbc", "x\n\nbc", "x\r\nbc", "x \t\n\nbc", "'\nbc",
                            "x's\nbc", "\nbc", "x!!\nbc", "x\n \nbc", "1.\n\nbc"}) {
    std::vector<std::string_view> pieces;
    std::deque<std::string> arena;
    PreTokenize(probe, false, false, &pieces, &arena);
    if (pieces.empty() || pieces.back() != "bc") return false;
  }
  return true;
}

std::string HfTokenizer::Normalize(std::string_view text, bool prepend) const {
  std::string s(text);
  for (const NormalizerStep& n : normalizers_) {
    switch (n.kind) {
      case NormalizerStep::kNfc:
        s = unicode::Nfc(s);
        break;
      case NormalizerStep::kPrepend:
        if (prepend && !s.empty()) s = n.text + s;
        break;
      case NormalizerStep::kReplace:
        if (n.regex) {
          PreTokenizerStep as_split;
          as_split.regex = n.regex;
          std::string out;
          size_t last = 0;
          for (const auto& [b, e] : FindMatches(s, as_split)) {
            out.append(s, last, b - last);
            out += n.content;
            last = e;
          }
          out.append(s, last, std::string::npos);
          s = std::move(out);
        } else {
          ReplaceAll(&s, n.text, n.content);
        }
        break;
      case NormalizerStep::kStrip: {
        size_t b = 0, e = s.size();
        while (n.left && b < e) {
          int len;
          const uint32_t cp = unicode::DecodeUtf8(s, b, &len);
          if (!unicode::IsWhiteSpace(cp)) break;
          b += static_cast<size_t>(len);
        }
        while (n.right && e > b) {
          size_t start = e - 1;
          while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
          int len;
          const uint32_t cp = unicode::DecodeUtf8(s, start, &len);
          if (!unicode::IsWhiteSpace(cp)) break;
          e = start;
        }
        s = s.substr(b, e - b);
        break;
      }
    }
  }
  return s;
}

void HfTokenizer::PreTokenize(std::string_view text, bool text_start, bool prefix,
                              std::vector<std::string_view>* pieces, std::deque<std::string>* arena) const {
  // Pieces are views of `text` or of strings a step rewrote, kept in `arena`.
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const PreTokenizerStep& step : pre_tokenizers_) {
    next.clear();
    for (size_t i = 0; i < current.size(); ++i) {
      std::string_view piece = current[i];
      switch (step.kind) {
        case PreTokenizerStep::kByteLevel:
          if (step.add_prefix_space && (prefix || i > 0) && !StartsWith(piece, " ")) {
            std::string prefixed;
            prefixed.reserve(piece.size() + 1);
            prefixed.push_back(' ');
            prefixed.append(piece);
            arena->push_back(std::move(prefixed));
            piece = arena->back();
          }
          if (step.regex) {
            SplitPiece(piece, FindMatches(piece, step), Behavior::kIsolated, false, &next);
          } else {
            next.push_back(piece);
          }
          break;
        case PreTokenizerStep::kMetaspace: {
          std::string rewritten(piece);
          ReplaceAll(&rewritten, " ", step.replacement);
          const bool prepend = (step.prepend == Prepend::kAlways && (prefix || i > 0)) ||
                               (step.prepend == Prepend::kFirst && i == 0 && text_start);
          if (prepend && !StartsWith(rewritten, step.replacement)) rewritten = step.replacement + rewritten;
          arena->push_back(std::move(rewritten));
          piece = arena->back();
          if (step.split) {
            SplitPiece(piece, FindMatches(piece, step), Behavior::kMergedWithNext, false, &next);
          } else {
            next.push_back(piece);
          }
          break;
        }
        case PreTokenizerStep::kSplit:
        case PreTokenizerStep::kDigits:
          SplitPiece(piece, FindMatches(piece, step), step.behavior, step.invert, &next);
          break;
      }
    }
    current.swap(next);
  }
  for (std::string_view p : current) {
    if (p.empty()) continue;
    if (!split_before_metaspace_) {
      pieces->push_back(p);
      continue;
    }
    // Before each U+2581 that follows another character.
    size_t start = 0;
    for (size_t pos = p.find(kMetaspace, 1); pos != std::string_view::npos; pos = p.find(kMetaspace, pos + 3)) {
      if (pos >= 3 && p.compare(pos - 3, 3, kMetaspace) == 0) continue;
      pieces->push_back(p.substr(start, pos - start));
      start = pos;
    }
    pieces->push_back(p.substr(start));
  }
}

void HfTokenizer::EncodeSegment(std::string_view text, bool text_start, bool prepend, std::vector<uint32_t>* ids) const {
  std::string normalized;
  if (!normalizers_.empty()) {
    normalized = Normalize(text, prepend);
    text = normalized;
  }
  std::vector<std::string_view> pieces;
  std::deque<std::string> arena;
  if (norm_matcher_.empty()) {
    PreTokenize(text, text_start, prepend, &pieces, &arena);
  } else {
    bool first = true;
    for (const auto& s : norm_matcher_.Split(text)) {
      if (s.is_token) {
        for (std::string_view p : pieces) model_->EncodeWord(p, ids);
        pieces.clear();
        ids->push_back(s.id);
      } else {
        const bool at_start = first && s.begin == 0;
        PreTokenize(text.substr(s.begin, s.end - s.begin), text_start && at_start, prepend || !at_start, &pieces,
                    &arena);
      }
      first = false;
    }
  }
  for (std::string_view p : pieces) model_->EncodeWord(p, ids);
}

void HfTokenizer::Encode(std::string_view text, bool document_start, std::vector<uint32_t>* ids) const {
  if (raw_matcher_.empty()) {
    EncodeSegment(text, document_start, document_start, ids);
    return;
  }
  for (const auto& s : raw_matcher_.Split(text)) {
    if (s.is_token) {
      ids->push_back(s.id);
      continue;
    }
    const bool at_start = s.begin == 0;
    EncodeSegment(text.substr(s.begin, s.end - s.begin), at_start && document_start, !at_start || document_start,
                  ids);
  }
}

std::string HfTokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) {
    const auto added = added_content_.find(id);
    if (added != added_content_.end()) {
      out += added->second;
      continue;
    }
    const std::string* bytes = model_->TokenBytes(id);
    if (bytes == nullptr) continue;
    if (decode_byte_fallback_ && bytes->size() == 6 && StartsWith(*bytes, "<0x") && (*bytes)[5] == '>' &&
        std::isxdigit(static_cast<unsigned char>((*bytes)[3])) && std::isxdigit(static_cast<unsigned char>((*bytes)[4]))) {
      out.push_back(static_cast<char>(std::stoi(bytes->substr(3, 2), nullptr, 16)));
      continue;
    }
    std::string piece = *bytes;
    if (decode_metaspace_) ReplaceAll(&piece, kMetaspace, " ");
    out += piece;
  }
  for (int i = 0; i < decode_strip_spaces_ && !out.empty() && out[0] == ' '; ++i) out.erase(0, 1);
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& path, const std::string& text,
                                           const std::string& eot_token) {
  const json root = ParseJson(text, "tokenizer '" + path + "'");
  return std::make_unique<HfTokenizer>(path, root, eot_token);
}

}  // namespace llmplan::data::internal
