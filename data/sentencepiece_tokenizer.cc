// SentencePiece tokenizer.model with a BPE model (Llama 2, Mistral). The
// ModelProto is read field by field (protobuf's wire format is simple enough
// that a reader of the few fields needed is shorter than the dependency):
//   ModelProto      1 pieces (repeated), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece   1 piece, 2 score (float), 3 type (1 normal, 2 unknown,
//                   3 control, 4 user-defined, 5 unused, 6 byte)
//   TrainerSpec     3 model_type (1 unigram, 2 BPE, 3 word, 4 char),
//                   24 treat_whitespace_as_suffix, 35 byte_fallback,
//                   40 unk_id, 41 bos_id, 42 eos_id
//   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix,
//                   4 remove_extra_whitespaces, 5 escape_whitespaces
// Encoding is SentencePiece's: normalize (dummy prefix, spaces as U+2581),
// user-defined pieces as units, then merge the adjacent pair whose
// concatenation is the piece with the highest score, the leftmost first,
// until none is a piece; a character no piece covers becomes its <0xNN>
// byte pieces (byte_fallback) or unk. Control pieces (<s>, </s>) in the text
// are text, as in SentencePiece.
#include <algorithm>
#include <cstring>
#include <map>

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

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, const std::string& bytes, const std::string& eot_token);
  void Encode(std::string_view text, bool document_start, std::vector<uint32_t>* ids) const override;
  std::string Decode(const std::vector<uint32_t>& ids) const override;

 private:
  [[noreturn]] void Fail(const std::string& what) const { throw UserError(context_ + ": " + what); }
  void EncodeNormalized(std::string_view text, std::vector<uint32_t>* ids) const;

  std::string context_;
  std::vector<Piece> pieces_;
  std::unique_ptr<BpeModel> model_;
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
  bool has_charsmap = false;
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
          has_charsmap = !n.Bytes().empty();
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
  if (model_type != 2) {
    const char* names[] = {"?", "Unigram", "BPE", "Word", "Char"};
    Fail(std::string("SentencePiece model type ") + (model_type >= 1 && model_type <= 4 ? names[model_type] : "?") +
         " is not supported (" + kSupported + ")");
  }
  if (has_charsmap) {
    Fail("SentencePiece normalizer '" + normalizer_name +
         "' (a precompiled character map) is not supported: only identity normalization (" + kSupported + ")");
  }
  if (whitespace_as_suffix) Fail("SentencePiece treat_whitespace_as_suffix is not supported");
  if (unk_id < 0 || unk_id >= n) Fail("unk_id " + std::to_string(unk_id) + " is not a piece");

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
  split_before_metaspace_ = escape_whitespaces_ && !spans_word;
  line_splittable_ = !spans_line && !user_defined_.AnyContains('\n');

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
  description_ = "SentencePiece BPE, vocab " + std::to_string(n);
}

void SentencePieceTokenizer::EncodeNormalized(std::string_view text, std::vector<uint32_t>* ids) const {
  if (!split_before_metaspace_) {
    model_->EncodeWord(text, ids);
    return;
  }
  size_t start = 0;
  for (size_t pos = text.find(kMetaspace, 1); pos != std::string_view::npos; pos = text.find(kMetaspace, pos + 3)) {
    if (pos >= 3 && text.compare(pos - 3, 3, kMetaspace) == 0) continue;
    model_->EncodeWord(text.substr(start, pos - start), ids);
    start = pos;
  }
  model_->EncodeWord(text.substr(start), ids);
}

void SentencePieceTokenizer::Encode(std::string_view text, bool document_start, std::vector<uint32_t>* ids) const {
  std::string s;
  s.reserve(text.size() + 3);
  if (remove_extra_whitespaces_) {
    // Leading, trailing and repeated spaces go.
    bool space = true;  // drops leading ones
    for (char c : text) {
      if (c == ' ') {
        if (!space) s.push_back(' ');
        space = true;
      } else {
        s.push_back(c);
        space = false;
      }
    }
    if (!s.empty() && s.back() == ' ') s.pop_back();
  } else {
    s.assign(text);
  }
  if (s.empty()) return;
  if (add_dummy_prefix_ && document_start) s.insert(0, 1, ' ');
  if (escape_whitespaces_) {
    std::string escaped;
    escaped.reserve(s.size() + s.size() / 4);
    for (char c : s) {
      if (c == ' ') {
        escaped += kMetaspace;
      } else {
        escaped.push_back(c);
      }
    }
    s.swap(escaped);
  }
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
