// SentencePiece tokenizer.model, BPE (Llama 2, Mistral) or unigram (T5,
// ALBERT, XLNet style). The ModelProto is read field by field (protobuf's
// wire format is simple enough that a reader of the few fields needed is
// shorter than the dependency):
//   ModelProto      1 pieces (repeated), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece   1 piece, 2 score (float), 3 type (1 normal, 2 unknown,
//                   3 control, 4 user-defined, 5 unused, 6 byte)
//   TrainerSpec     3 model_type (1 unigram, 2 BPE, 3 word, 4 char),
//                   24 treat_whitespace_as_suffix, 35 byte_fallback,
//                   40 unk_id, 41 bos_id, 42 eos_id
//   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix,
//                   4 remove_extra_whitespaces, 5 escape_whitespaces
// Encoding is SentencePiece's:
//   normalize: the precompiled character map (nmt_nfkc and the like: a
//     darts-clone double-array trie of rewrite rules, longest match first),
//     extra spaces removed, a dummy prefix, spaces as U+2581;
//   BPE: merge the adjacent pair whose concatenation is the piece with the
//     highest score, the leftmost first, until none is a piece;
//   unigram: the segmentation with the highest total score (Viterbi; a
//     character no piece covers is unk, scored 10 below the lowest piece);
//   then a character no piece covers becomes its <0xNN> byte pieces
//   (byte_fallback) or unk, consecutive unks one.
// User-defined pieces are units; control pieces (<s>, </s>) in the text are
// text, as in SentencePiece.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "base/user_error.h"
#include "data/bpe.h"
#include "data/tokenizer_parts.h"
#include "data/unicode.h"

namespace llmplan::data::internal {

namespace {

constexpr const char* kMetaspace = "\xE2\x96\x81";

// A protobuf message being read. Every read is bounds-checked; a damaged
// file is a UserError from the caller's Fail.
class WireReader {
 public:
  WireReader(std::string_view data, const std::string& context) : data_(data), context_(context) {}

  bool Done() const { return pos_ >= data_.size(); }
  // Reads a field's key; false at the end.
  bool Next(uint32_t* field, int* wire_type) {
    if (Done()) return false;
    const uint64_t key = Varint();
    *field = static_cast<uint32_t>(key >> 3);
    *wire_type = static_cast<int>(key & 7);
    if (*field == 0) Fail("a field number 0");
    return true;
  }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (Done()) Fail("a truncated number");
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
    Fail("an over-long number");
  }
  std::string_view Bytes() {
    const uint64_t n = Varint();
    if (n > data_.size() - pos_) Fail("a field longer than the file");
    const std::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  float Fixed32Float() {
    if (data_.size() - pos_ < 4) Fail("a truncated float");
    float f;
    std::memcpy(&f, data_.data() + pos_, 4);  // little-endian, as the host
    pos_ += 4;
    return f;
  }
  void Skip(int wire_type) {
    switch (wire_type) {
      case 0: Varint(); return;
      case 1:
        if (data_.size() - pos_ < 8) Fail("a truncated field");
        pos_ += 8;
        return;
      case 2: Bytes(); return;
      case 5:
        if (data_.size() - pos_ < 4) Fail("a truncated field");
        pos_ += 4;
        return;
      default: Fail("an unknown wire type " + std::to_string(wire_type));
    }
  }
  [[noreturn]] void Fail(const std::string& what) const {
    throw UserError(context_ + ": not a SentencePiece model, or a damaged one (" + what + " at byte " +
                    std::to_string(pos_) + "); " + kSupported);
  }

 private:
  std::string_view data_;
  const std::string& context_;
  size_t pos_ = 0;
};

enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Piece {
  std::string text;
  float score = 0;
  int type = kNormal;
};

// The precompiled character map: <uint32 trie bytes><darts-clone double
// array of uint32 units><NUL-terminated replacement strings>. A key's value is
// the offset of its replacement.
class CharsMap {
 public:
  // Calls fail(why) (which throws) when the blob is malformed.
  template <typename Fail>
  CharsMap(std::string_view blob, Fail fail) {
    if (blob.empty()) return;
    if (blob.size() < 4) fail("its character map is truncated");
    uint32_t trie_bytes;
    std::memcpy(&trie_bytes, blob.data(), 4);
    if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4) {
      fail("its character map's trie size is wrong");
    }
    units_.resize(trie_bytes / 4);
    std::memcpy(units_.data(), blob.data() + 4, trie_bytes);
    replacements_ = std::string(blob.substr(4 + trie_bytes));
  }
  bool empty() const { return units_.empty(); }

  // The longest rule matching a prefix of `text`: sets *replacement and
  // returns the bytes it covers, or 0 when none does. Every index is
  // checked: a damaged trie stops the search, it never reads outside.
  size_t LongestMatch(std::string_view text, std::string_view* replacement) const {
    size_t id = Offset(units_[0]);
    size_t best = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      id ^= c;
      if (id >= units_.size()) break;
      const uint32_t unit = units_[id];
      if (Label(unit) != c) break;
      id ^= Offset(unit);
      if (id >= units_.size()) break;
      if (HasLeaf(unit)) {
        const uint32_t value = units_[id] & ((1u << 31) - 1);
        if (value < replacements_.size()) {
          best = i + 1;
          *replacement = std::string_view(replacements_.c_str() + value);
        }
      }
    }
    return best;
  }

 private:
  static bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
  static uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
  static size_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

  std::vector<uint32_t> units_;
  std::string replacements_;
};

// Unigram segmentation: the highest-scoring path through the lattice of
// pieces.
class UnigramModel {
 public:
  UnigramModel(const std::vector<Piece>& pieces, uint32_t unk_id) : unk_id_(unk_id) {
    float min_score = std::numeric_limits<float>::max();
    max_score_ = std::numeric_limits<float>::lowest();
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      if (p.type == kNormal) {
        min_score = std::min(min_score, p.score);
        max_score_ = std::max(max_score_, p.score);
      }
      if (p.type == kNormal || p.type == kUserDefined) {
        pieces_.emplace(p.text, Entry{static_cast<uint32_t>(i), p.score, p.type == kUserDefined});
        max_piece_bytes_ = std::max(max_piece_bytes_, p.text.size());
        for (size_t cut = 1; cut < p.text.size(); ++cut) prefixes_.emplace(p.text.substr(0, cut));
      }
    }
    unk_score_ = min_score - 10.0f;  // SentencePiece's kUnkPenalty
  }

  // Appends (id, text) of the best segmentation of `text`, in order; unk
  // pieces keep their text for byte fallback.
  void Encode(std::string_view text, std::vector<std::pair<uint32_t, std::string_view>>* out) const {
    // SentencePiece's EncodeOptimized, operation for operation: the best path
    // ending at each byte, candidates scored in double (its user-defined
    // bonus makes the expression a double) against the stored float, the
    // first of equal candidates kept. Rounding then breaks ties as there.
    struct Node {
      int64_t starts_at = -1;
      uint32_t id = 0;
      float score = 0;
    };
    const size_t size = text.size();
    std::vector<Node> best(size + 1);
    for (size_t start = 0; start < size;) {
      int char_len;
      unicode::DecodeUtf8(text, start, &char_len);
      const size_t mblen = static_cast<size_t>(char_len);
      const float here = best[start].score;
      bool has_single = false;
      const size_t limit = std::min(size, start + max_piece_bytes_);
      for (size_t end = start + mblen; end <= limit;) {
        const auto it = pieces_.find(text.substr(start, end - start));
        if (it != pieces_.end()) {
          const Entry& e = it->second;
          const double score =
              e.user_defined ? static_cast<double>(end - start) * max_score_ - 0.1 : static_cast<double>(e.score);
          Node& target = best[end];
          const double candidate = score + here;
          if (target.starts_at == -1 || candidate > target.score) {
            target = {static_cast<int64_t>(start), e.id, static_cast<float>(candidate)};
          }
          if (end - start == mblen) has_single = true;
        }
        // No longer piece starts with this one: the trie walk would end here.
        if (end >= size || prefixes_.find(text.substr(start, end - start)) == prefixes_.end()) break;
        int next_len;
        unicode::DecodeUtf8(text, end, &next_len);
        end += static_cast<size_t>(next_len);
      }
      if (!has_single) {
        Node& target = best[start + mblen];
        const float candidate = unk_score_ + here;
        if (target.starts_at == -1 || candidate > target.score) {
          target = {static_cast<int64_t>(start), unk_id_, candidate};
        }
      }
      start += mblen;
    }
    const size_t first = out->size();
    for (size_t end = size; end > 0;) {
      const Node& node = best[end];
      const auto start = static_cast<size_t>(node.starts_at);
      out->emplace_back(node.id, text.substr(start, end - start));
      end = start;
    }
    std::reverse(out->begin() + static_cast<std::ptrdiff_t>(first), out->end());
  }

 private:
  struct Entry {
    uint32_t id;
    float score;
    bool user_defined;
  };
  std::unordered_map<std::string, Entry, StringHash, std::equal_to<>> pieces_;
  std::unordered_set<std::string, StringHash, std::equal_to<>> prefixes_;  // of longer pieces
  uint32_t unk_id_;
  float max_score_;
  float unk_score_;
  size_t max_piece_bytes_ = 1;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, const std::string& bytes, const std::string& eot_token);
  void Encode(std::string_view text, bool document_start, std::vector<uint32_t>* ids) const override;
  std::string Decode(const std::vector<uint32_t>& ids) const override;
  std::optional<uint32_t> SpecialTokenId(std::string_view text) const override {
    for (size_t i = 0; i < pieces_.size(); ++i) {
      const Piece& p = pieces_[i];
      if ((p.type == kControl || p.type == kUserDefined) && p.text == text) return static_cast<uint32_t>(i);
    }
    return std::nullopt;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const { throw UserError(context_ + ": " + what); }
  std::string Normalize(std::string_view text, bool document_start) const;
  void EncodeNormalized(std::string_view text, std::vector<uint32_t>* ids) const;
  void EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const;

  std::string context_;
  std::vector<Piece> pieces_;
  std::unique_ptr<BpeModel> model_;          // BPE models
  std::unique_ptr<UnigramModel> unigram_;    // unigram models
  std::unique_ptr<CharsMap> charsmap_;
  uint32_t unk_id_ = 0;
  int64_t byte_ids_[256];                    // <0xNN> pieces, -1 when missing
  AddedTokenMatcher user_defined_;
  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = true;
  bool escape_whitespaces_ = true;
  bool byte_fallback_ = false;
  bool split_before_metaspace_ = false;
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path, const std::string& bytes,
                                               const std::string& eot_token)
    : context_("tokenizer '" + path + "'") {
  int model_type = 1;  // proto default: unigram
  int64_t unk_id = 0, bos_id = 1, eos_id = 2;
  bool whitespace_as_suffix = false;
  std::string normalizer_name;
  std::string_view charsmap;
  WireReader model(bytes, context_);
  uint32_t field;
  int wire;
  while (model.Next(&field, &wire)) {
    if (field == 1 && wire == 2) {
      WireReader p(model.Bytes(), context_);
      Piece piece;
      while (p.Next(&field, &wire)) {
        if (field == 1 && wire == 2) {
          piece.text = std::string(p.Bytes());
        } else if (field == 2 && wire == 5) {
          piece.score = p.Fixed32Float();
        } else if (field == 3 && wire == 0) {
          piece.type = static_cast<int>(p.Varint());
        } else {
          p.Skip(wire);
        }
      }
      pieces_.push_back(std::move(piece));
    } else if (field == 2 && wire == 2) {
      WireReader t(model.Bytes(), context_);
      while (t.Next(&field, &wire)) {
        if (wire != 0) {
          t.Skip(wire);
          continue;
        }
        const auto v = static_cast<int64_t>(static_cast<int32_t>(t.Varint()));  // int32 fields, sign-extended
        switch (field) {
          case 3: model_type = static_cast<int>(v); break;
          case 24: whitespace_as_suffix = v != 0; break;
          case 35: byte_fallback_ = v != 0; break;
          case 40: unk_id = v; break;
          case 41: bos_id = v; break;
          case 42: eos_id = v; break;
          default: break;
        }
      }
    } else if (field == 3 && wire == 2) {
      WireReader n(model.Bytes(), context_);
      while (n.Next(&field, &wire)) {
        if (field == 1 && wire == 2) {
          normalizer_name = std::string(n.Bytes());
        } else if (field == 2 && wire == 2) {
          charsmap = n.Bytes();
        } else if (field >= 3 && field <= 5 && wire == 0) {
          const bool v = n.Varint() != 0;
          (field == 3 ? add_dummy_prefix_ : field == 4 ? remove_extra_whitespaces_ : escape_whitespaces_) = v;
        } else {
          n.Skip(wire);
        }
      }
    } else {
      model.Skip(wire);
    }
  }
  if (pieces_.empty()) model.Fail("no pieces");
  const int64_t n = static_cast<int64_t>(pieces_.size());
  if (model_type != 1 && model_type != 2) {
    const char* names[] = {"?", "Unigram", "BPE", "Word", "Char"};
    Fail(std::string("SentencePiece model type ") + (model_type >= 1 && model_type <= 4 ? names[model_type] : "?") +
         " is not supported (" + kSupported + ")");
  }
  charsmap_ = std::make_unique<CharsMap>(charsmap, [&](const std::string& why) {
    Fail("normalizer '" + normalizer_name + "': " + why);
  });
  if (whitespace_as_suffix) Fail("SentencePiece treat_whitespace_as_suffix is not supported");
  if (unk_id < 0 || unk_id >= n) Fail("unk_id " + std::to_string(unk_id) + " is not a piece");
  unk_id_ = static_cast<uint32_t>(unk_id);
  for (int b = 0; b < 256; ++b) byte_ids_[b] = -1;
  for (int64_t i = 0; i < n; ++i) {
    const Piece& p = pieces_[static_cast<size_t>(i)];
    if (p.type == kByte && p.text.size() == 6 && p.text.compare(0, 3, "<0x") == 0 &&
        std::isxdigit(static_cast<unsigned char>(p.text[3])) && std::isxdigit(static_cast<unsigned char>(p.text[4]))) {
      byte_ids_[std::stoi(p.text.substr(3, 2), nullptr, 16)] = i;
    }
  }

  // Ranks from scores: the highest score merges first; equal scores share a
  // rank so that the leftmost pair goes first, as in SentencePiece.
  std::vector<float> scores;
  for (const Piece& p : pieces_) scores.push_back(p.score);
  std::sort(scores.begin(), scores.end(), std::greater<float>());
  scores.erase(std::unique(scores.begin(), scores.end()), scores.end());
  auto rank_of = [&](float s) {
    return static_cast<uint32_t>(std::lower_bound(scores.begin(), scores.end(), s, std::greater<float>()) - scores.begin());
  };

  BpeOptions options;
  options.byte_fallback = byte_fallback_;
  options.fuse_unk = true;  // SentencePiece joins consecutive unknown pieces
  options.unk = static_cast<uint32_t>(unk_id);
  model_ = std::make_unique<BpeModel>(options);
  std::vector<AddedToken> user_defined;
  for (int64_t i = 0; i < n; ++i) {
    const Piece& p = pieces_[static_cast<size_t>(i)];
    if (p.text.empty()) Fail("piece " + std::to_string(i) + " is empty");
    // Control and unknown pieces are never produced from text.
    if (p.type == kControl || p.type == kUnknown) continue;
    model_->AddToken(p.text, static_cast<uint32_t>(i));
    if (p.type == kUserDefined) user_defined.push_back({p.text, static_cast<uint32_t>(i)});
  }
  // Every way to make a mergeable piece of two pieces is a merge.
  for (int64_t i = 0; i < n; ++i) {
    const Piece& p = pieces_[static_cast<size_t>(i)];
    if (p.type != kNormal && p.type != kUserDefined) continue;
    for (size_t cut = 1; cut < p.text.size(); ++cut) {
      if ((static_cast<unsigned char>(p.text[cut]) & 0xC0) == 0x80) continue;  // inside a character
      const auto left = model_->Find(std::string_view(p.text).substr(0, cut));
      const auto right = model_->Find(std::string_view(p.text).substr(cut));
      if (left && right) model_->AddMerge(*left, *right, rank_of(p.score), static_cast<uint32_t>(i));
    }
  }
  model_->Finish();
  user_defined_ = AddedTokenMatcher(std::move(user_defined));
  if (model_type == 1) {
    unigram_ = std::make_unique<UnigramModel>(pieces_, unk_id_);
    model_.reset();
  }

  bool spans_word = false, spans_line = false;
  for (const Piece& p : pieces_) {
    for (size_t pos = p.text.find(kMetaspace); pos != std::string::npos && !spans_word;
         pos = p.text.find(kMetaspace, pos + 3)) {
      spans_word = pos > 0 && !(pos >= 3 && p.text.compare(pos - 3, 3, kMetaspace) == 0);
    }
    for (size_t i = 0; i + 1 < p.text.size(); ++i) {
      spans_line = spans_line || (p.text[i] == '\n' && ((p.text[i + 1] | 32) >= 'a' && (p.text[i + 1] | 32) <= 'z'));
    }
  }
  // Unigram scores are float sums along the whole text, and rounding decides
  // ties: a unigram model sees the whole text, never words or lines.
  split_before_metaspace_ = escape_whitespaces_ && !spans_word && !unigram_;
  // A character map may rewrite a newline (nmt_nfkc makes it a space), and
  // collapsed spaces depend on what came before: then documents stay whole.
  line_splittable_ = !spans_line && !user_defined_.AnyContains('\n') && charsmap_->empty() && !unigram_;

  vocab_size_ = n;
  if (!eot_token.empty()) {
    const auto it = std::find_if(pieces_.begin(), pieces_.end(), [&](const Piece& p) { return p.text == eot_token; });
    if (it == pieces_.end()) Fail("has no piece '" + eot_token + "' (given as --eot-token)");
    end_of_text_ = static_cast<uint32_t>(it - pieces_.begin());
  } else {
    if (eos_id < 0 || eos_id >= n) Fail("has no eos piece (eos_id " + std::to_string(eos_id) + "): pass --eot-token PIECE");
    end_of_text_ = static_cast<uint32_t>(eos_id);
  }
  if (bos_id >= 0 && bos_id < n) begin_of_text_ = static_cast<uint32_t>(bos_id);
  description_ = std::string("SentencePiece ") + (unigram_ ? "unigram" : "BPE") + ", vocab " + std::to_string(n);
}

void SentencePieceTokenizer::EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const {
  if (model_) {
    model_->EncodeWord(word, ids);
    return;
  }
  std::vector<std::pair<uint32_t, std::string_view>> pieces;
  unigram_->Encode(word, &pieces);
  bool last_unk = false;
  for (const auto& [id, text] : pieces) {
    if (id != unk_id_) {
      ids->push_back(id);
      last_unk = false;
      continue;
    }
    bool all_bytes = byte_fallback_;
    for (char c : text) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
    if (all_bytes) {
      for (char c : text) ids->push_back(static_cast<uint32_t>(byte_ids_[static_cast<unsigned char>(c)]));
      last_unk = false;
    } else if (!last_unk) {
      ids->push_back(unk_id_);  // consecutive unknown pieces are one
      last_unk = true;
    }
  }
}

void SentencePieceTokenizer::EncodeNormalized(std::string_view text, std::vector<uint32_t>* ids) const {
  if (!split_before_metaspace_) {
    EncodeWord(text, ids);
    return;
  }
  size_t start = 0;
  for (size_t pos = text.find(kMetaspace, 1); pos != std::string_view::npos; pos = text.find(kMetaspace, pos + 3)) {
    if (pos >= 3 && text.compare(pos - 3, 3, kMetaspace) == 0) continue;
    EncodeWord(text.substr(start, pos - start), ids);
    start = pos;
  }
  EncodeWord(text.substr(start), ids);
}

std::string SentencePieceTokenizer::Normalize(std::string_view input, bool document_start) const {
  // SentencePiece's Normalizer::Normalize: rule by rule (the longest first),
  // a character at a time where no rule matches (a stray byte becomes
  // U+FFFD), user-defined pieces untouched; then spaces collapsed (leading,
  // repeated, trailing) and escaped.
  auto next = [&](std::string_view rest, std::string_view* out) -> size_t {
    if (!user_defined_.empty()) {
      const auto segments = user_defined_.Split(rest.substr(0, 256));
      if (!segments.empty() && segments[0].is_token && segments[0].begin == 0) {
        *out = rest.substr(0, segments[0].end);
        return segments[0].end;
      }
    }
    if (!charsmap_->empty()) {
      const size_t n = charsmap_->LongestMatch(rest, out);
      if (n > 0) return n;
    }
    int len;
    if (unicode::DecodeUtf8(rest, 0, &len) == unicode::kInvalid) {
      *out = "\xEF\xBF\xBD";
      return 1;
    }
    *out = rest.substr(0, static_cast<size_t>(len));
    return static_cast<size_t>(len);
  };
  std::string_view rest = input;
  std::string_view piece;
  if (remove_extra_whitespaces_) {
    while (!rest.empty()) {
      const size_t n = next(rest, &piece);
      if (piece != " ") break;
      rest.remove_prefix(n);
    }
  }
  std::string out;
  if (rest.empty()) return out;
  out.reserve(rest.size() + rest.size() / 4 + 3);
  const std::string space = escape_whitespaces_ ? kMetaspace : " ";
  if (add_dummy_prefix_ && document_start) out += space;
  bool previous_space = remove_extra_whitespaces_;
  while (!rest.empty()) {
    const size_t n = next(rest, &piece);
    rest.remove_prefix(n);
    while (previous_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    if (!piece.empty()) {
      for (char c : piece) {
        if (c == ' ') {
          out += space;
        } else {
          out.push_back(c);
        }
      }
      previous_space = piece.back() == ' ';
    }
    if (!remove_extra_whitespaces_) previous_space = false;
  }
  if (remove_extra_whitespaces_) {
    while (out.size() >= space.size() && out.compare(out.size() - space.size(), space.size(), space) == 0) {
      out.resize(out.size() - space.size());
    }
  }
  return out;
}

void SentencePieceTokenizer::Encode(std::string_view text, bool document_start, std::vector<uint32_t>* ids) const {
  const std::string s = Normalize(text, document_start);
  if (s.empty()) return;
  if (user_defined_.empty()) {
    EncodeNormalized(s, ids);
    return;
  }
  for (const auto& seg : user_defined_.Split(s)) {
    if (seg.is_token) {
      ids->push_back(seg.id);
    } else {
      EncodeNormalized(std::string_view(s).substr(seg.begin, seg.end - seg.begin), ids);
    }
  }
}

std::string SentencePieceTokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id >= pieces_.size()) continue;
    const Piece& p = pieces_[id];
    if (p.type == kControl) continue;
    if (p.type == kByte && p.text.size() == 6 && std::isxdigit(static_cast<unsigned char>(p.text[3])) &&
        std::isxdigit(static_cast<unsigned char>(p.text[4]))) {
      out.push_back(static_cast<char>(std::stoi(p.text.substr(3, 2), nullptr, 16)));
      continue;
    }
    if (p.type == kUnknown) {
      out += " \xE2\x81\x87 ";  // SentencePiece's unk surface
      continue;
    }
    for (size_t pos = 0; pos < p.text.size();) {
      if (p.text.compare(pos, 3, kMetaspace) == 0) {
        out.push_back(' ');
        pos += 3;
      } else {
        out.push_back(p.text[pos++]);
      }
    }
  }
  if (add_dummy_prefix_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> LoadSentencePiece(const std::string& path, const std::string& bytes,
                                             const std::string& eot_token) {
  return std::make_unique<SentencePieceTokenizer>(path, bytes, eot_token);
}

}  // namespace llmplan::data::internal
