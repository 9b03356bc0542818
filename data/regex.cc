#include "data/regex.h"

#include <utility>

#include "base/user_error.h"
#include "data/unicode.h"

namespace llmplan::data {

using unicode::GeneralCategory;

struct Regex::Node {
  enum Kind { kEmpty, kChar, kClass, kAny, kSeq, kAlt, kRepeat, kLook, kAtomic } kind = kEmpty;
  uint32_t c = 0;
  bool icase = false;
  int cls = 0;
  std::vector<Node> children;
  int min = 0, max = 0;  // kRepeat; max -1: unbounded
  bool greedy = true, possessive = false, negative = false;
};

namespace {

uint32_t Bit(GeneralCategory c) { return uint32_t{1} << c; }

constexpr uint32_t kLetters = (1u << unicode::kLu) | (1u << unicode::kLl) | (1u << unicode::kLt) |
                              (1u << unicode::kLm) | (1u << unicode::kLo);
constexpr uint32_t kMarks = (1u << unicode::kMn) | (1u << unicode::kMc) | (1u << unicode::kMe);

// \p{name}: a general category or a group of them; 0 when unknown.
uint32_t CategoryMask(const std::string& name) {
  static const char* const kNames[] = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
                                       "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc",
                                       "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  for (int i = 0; i < unicode::kCategoryCount; ++i) {
    if (name == kNames[i]) return uint32_t{1} << i;
  }
  auto group = [](char first) {
    uint32_t mask = 0;
    for (int i = 0; i < unicode::kCategoryCount; ++i) {
      if (kNames[i][0] == first) mask |= uint32_t{1} << i;
    }
    return mask;
  };
  if (name == "L" || name == "Letter") return group('L');
  if (name == "M" || name == "Mark") return group('M');
  if (name == "N" || name == "Number") return group('N');
  if (name == "P" || name == "Punctuation") return group('P');
  if (name == "S" || name == "Symbol") return group('S');
  if (name == "Z" || name == "Separator") return group('Z');
  if (name == "C" || name == "Other") return group('C');
  return 0;
}

bool IsWord(uint32_t cp) {
  if (cp < 128) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  const GeneralCategory c = unicode::Category(cp);
  return ((kLetters | kMarks | Bit(unicode::kNd) | Bit(unicode::kPc)) >> c) & 1;
}

uint32_t FoldAscii(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// Case-insensitive comparison of a text unit with a pattern character:
// ASCII folding, plus the two non-ASCII code points that fold onto ASCII
// letters (U+017F LONG S, U+212A KELVIN SIGN), as Oniguruma folds them.
bool EqualsFolded(uint32_t unit, uint32_t pattern_char) {
  const uint32_t p = FoldAscii(pattern_char);
  if (FoldAscii(unit) == p) return true;
  return (p == 's' && unit == 0x17F) || (p == 'k' && unit == 0x212A);
}

}  // namespace

bool Regex::CharClass::MatchesSlow(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) {
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  }
  if (!in && (categories | not_categories) != 0) {
    const uint32_t bit = Bit(unicode::Category(cp));
    in = (categories & bit) != 0 || (not_categories != 0 && (not_categories & bit) == 0);
  }
  if (!in && (space || not_space)) in = space ? unicode::IsWhiteSpace(cp) : !unicode::IsWhiteSpace(cp);
  if (!in && space && not_space) in = true;
  if (!in && (digit || not_digit)) {
    const bool d = unicode::Category(cp) == unicode::kNd;
    in = (digit && d) || (not_digit && !d);
  }
  if (!in && (word || not_word)) {
    const bool w = IsWord(cp);
    in = (word && w) || (not_word && !w);
  }
  return in != negated;
}

// Recursive-descent parser over the pattern's code points.
class Regex::Parser {
 public:
  Parser(std::string_view pattern, const std::string& what, std::vector<CharClass>* classes)
      : pattern_(pattern), what_(what), classes_(classes) {
    for (size_t pos = 0; pos < pattern.size();) {
      int len;
      const uint32_t cp = unicode::DecodeUtf8(pattern, pos, &len);
      if (cp == unicode::kInvalid) Fail("it is not valid UTF-8");
      cps_.push_back(cp);
      pos += static_cast<size_t>(len);
    }
  }

  Node Parse() {
    Node node = ParseAlt(false);
    if (i_ != cps_.size()) Fail("unbalanced ')'");
    return node;
  }

  [[noreturn]] void Fail(const std::string& why) const {
    throw UserError(what_ + ": regex '" + std::string(pattern_) + "' is not supported: " + why +
                    " (supported: literals, classes, \\s \\d \\w \\p{..}, groups, lookahead, quantifiers)");
  }

 private:
  bool AtEnd() const { return i_ >= cps_.size(); }
  uint32_t Peek() const { return cps_[i_]; }
  bool Eat(uint32_t c) {
    if (!AtEnd() && Peek() == c) {
      ++i_;
      return true;
    }
    return false;
  }

  Node ParseAlt(bool icase) {
    Node alt;
    alt.kind = Node::kAlt;
    alt.children.push_back(ParseSeq(icase));
    while (Eat('|')) alt.children.push_back(ParseSeq(icase));
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  Node ParseSeq(bool icase) {
    Node seq;
    seq.kind = Node::kSeq;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') seq.children.push_back(ParseQuantified(icase));
    if (seq.children.size() == 1) return std::move(seq.children[0]);
    return seq;
  }

  int ParseNumber() {
    int n = 0;
    bool any = false;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      n = n * 10 + static_cast<int>(Peek() - '0');
      if (n > 1000) Fail("a repetition count over 1000");
      ++i_;
      any = true;
    }
    return any ? n : -1;
  }

  Node ParseQuantified(bool icase) {
    Node atom = ParseAtom(icase);
    while (!AtEnd()) {
      int min, max;
      const size_t start = i_;
      if (Eat('?')) {
        min = 0, max = 1;
      } else if (Eat('*')) {
        min = 0, max = -1;
      } else if (Eat('+')) {
        min = 1, max = -1;
      } else if (Eat('{')) {
        min = ParseNumber();
        if (min < 0) {  // a literal '{'
          i_ = start;
          break;
        }
        max = min;
        if (Eat(',')) max = ParseNumber();
        if (!Eat('}')) Fail("a malformed {n,m} repetition");
        if (max >= 0 && max < min) Fail("a repetition {n,m} with m < n");
      } else {
        break;
      }
      Node rep;
      rep.kind = Node::kRepeat;
      rep.min = min;
      rep.max = max;
      if (Eat('?')) {
        rep.greedy = false;
      } else if (Eat('+')) {
        rep.possessive = true;
      }
      if (atom.kind == Node::kLook) Fail("a quantified lookahead");
      rep.children.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  uint32_t ParseHex(int digits) {  // digits -1: \x{...}
    uint32_t v = 0;
    int n = 0;
    const bool braced = digits < 0;
    if (braced && !Eat('{')) Fail("a malformed \\x{...}");
    while (!AtEnd() && (braced ? Peek() != '}' : n < digits)) {
      const uint32_t c = Peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        break;
      }
      v = v * 16 + d;
      ++n;
      ++i_;
      if (v > 0x10FFFF) Fail("a code point past U+10FFFF");
    }
    if (braced && !Eat('}')) Fail("a malformed \\x{...}");
    if (n == 0 || (!braced && n != digits)) Fail("a malformed hexadecimal escape");
    return v;
  }

  // After a backslash: adds a class escape to `cls` and returns true, or
  // returns false and sets *literal.
  bool ParseEscape(CharClass* cls, uint32_t* literal) {
    if (AtEnd()) Fail("a trailing backslash");
    const uint32_t c = cps_[i_++];
    switch (c) {
      case 's': cls->space = true; return true;
      case 'S': cls->not_space = true; return true;
      case 'd': cls->digit = true; return true;
      case 'D': cls->not_digit = true; return true;
      case 'w': cls->word = true; return true;
      case 'W': cls->not_word = true; return true;
      case 'p':
      case 'P': {
        std::string name;
        if (Eat('{')) {
          while (!AtEnd() && Peek() != '}') name.push_back(static_cast<char>(cps_[i_++] & 0x7F));
          if (!Eat('}')) Fail("a malformed \\p{...}");
        } else if (!AtEnd()) {
          name.push_back(static_cast<char>(cps_[i_++] & 0x7F));
        }
        bool negate = c == 'P';
        if (!name.empty() && name[0] == '^') {
          negate = !negate;
          name.erase(0, 1);
        }
        const uint32_t mask = CategoryMask(name);
        if (mask == 0) Fail("the unknown property \\p{" + name + "}");
        (negate ? cls->not_categories : cls->categories) |= mask;
        return true;
      }
      case 'r': *literal = '\r'; return false;
      case 'n': *literal = '\n'; return false;
      case 't': *literal = '\t'; return false;
      case 'f': *literal = '\f'; return false;
      case 'v': *literal = '\v'; return false;
      case 'x': *literal = (!AtEnd() && Peek() == '{') ? ParseHex(-1) : ParseHex(2); return false;
      case 'u': *literal = ParseHex(4); return false;
      default:
        if (c < 128 && !IsWord(c)) {
          *literal = c;
          return false;
        }
        Fail(std::string("the escape \\") + static_cast<char>(c & 0x7F));
    }
  }

  int AddClass(CharClass cls, bool icase) {
    if (icase) {
      const size_t n = cls.ranges.size();
      for (size_t k = 0; k < n; ++k) {
        const auto [lo, hi] = cls.ranges[k];
        for (uint32_t cp = lo; cp <= hi && cp < 128; ++cp) {
          if (cp >= 'a' && cp <= 'z') cls.ranges.emplace_back(cp - 32, cp - 32);
          if (cp >= 'A' && cp <= 'Z') cls.ranges.emplace_back(cp + 32, cp + 32);
        }
      }
    }
    for (uint32_t cp = 0; cp < 128; ++cp) {
      if (cls.MatchesSlow(cp)) cls.ascii[cp >> 6] |= uint64_t{1} << (cp & 63);
    }
    classes_->push_back(std::move(cls));
    return static_cast<int>(classes_->size() - 1);
  }

  Node ParseClass(bool icase) {
    CharClass cls;
    if (Eat('^')) cls.negated = true;
    bool first = true;
    while (true) {
      if (AtEnd()) Fail("an unterminated [...]");
      if (Peek() == ']' && !first) break;
      first = false;
      uint32_t lo;
      if (Eat('\\')) {
        if (ParseEscape(&cls, &lo)) continue;
      } else {
        if (Peek() == '[') Fail("nested classes");
        lo = cps_[i_++];
      }
      uint32_t hi = lo;
      if (!AtEnd() && Peek() == '-' && i_ + 1 < cps_.size() && cps_[i_ + 1] != ']') {
        ++i_;
        if (Eat('\\')) {
          CharClass ignored;
          if (ParseEscape(&ignored, &hi)) Fail("a range that ends in a class escape");
        } else {
          hi = cps_[i_++];
        }
        if (hi < lo) Fail("a range whose end comes before its start");
      }
      cls.ranges.emplace_back(lo, hi);
    }
    ++i_;  // ']'
    Node node;
    node.kind = Node::kClass;
    node.cls = AddClass(std::move(cls), icase);
    return node;
  }

  Node ParseAtom(bool icase) {
    const uint32_t c = cps_[i_++];
    Node node;
    switch (c) {
      case '(': {
        // Real patterns nest a few groups deep; a limit keeps a hostile one
        // from exhausting the stack.
        if (++depth_ > 100) Fail("groups nested more than 100 deep");
        if (Eat('?')) {
          if (Eat(':')) {
            node = ParseAlt(icase);
          } else if (Eat('i')) {
            if (!Eat(':')) Fail("inline flags other than (?i:...)");
            node = ParseAlt(true);
          } else if (Eat('=') || (!AtEnd() && Peek() == '!')) {
            const bool negative = Eat('!');
            node.kind = Node::kLook;
            node.negative = negative;
            node.children.push_back(ParseAlt(icase));
          } else if (Eat('>')) {
            node.kind = Node::kAtomic;
            node.children.push_back(ParseAlt(icase));
          } else {
            Fail("lookbehind, named groups or inline flags");
          }
        } else {
          node = ParseAlt(icase);  // capturing groups capture nothing here
        }
        if (!Eat(')')) Fail("an unclosed group");
        --depth_;
        return node;
      }
      case '[':
        return ParseClass(icase);
      case '.': {
        CharClass cls;
        cls.negated = true;
        cls.ranges.emplace_back('\n', '\n');
        node.kind = Node::kClass;
        node.cls = AddClass(std::move(cls), false);
        return node;
      }
      case '\\': {
        CharClass cls;
        uint32_t literal;
        if (ParseEscape(&cls, &literal)) {
          node.kind = Node::kClass;
          node.cls = AddClass(std::move(cls), icase);
          return node;
        }
        node.kind = Node::kChar;
        node.c = literal;
        node.icase = icase;
        return node;
      }
      case '^':
      case '$':
        Fail("anchors (^, $)");
      case '*':
      case '+':
      case '?':
        Fail("a quantifier with nothing before it");
      default:
        node.kind = Node::kChar;
        node.c = c;
        node.icase = icase && c < 128 && ((c | 32) >= 'a' && (c | 32) <= 'z');
        return node;
    }
  }

  std::string_view pattern_;
  const std::string& what_;
  std::vector<CharClass>* classes_;
  std::vector<uint32_t> cps_;
  size_t i_ = 0;
  int depth_ = 0;
};

Regex::Regex(std::string_view pattern, const std::string& what) : what_(what + ": pattern '" + std::string(pattern) + "'") {
  Parser parser(pattern, what, &classes_);
  const Node root = parser.Parse();
  // A repetition of something that can match nothing would loop forever.
  struct Check {
    static void Walk(const Node& n, const Parser& p) {
      if (n.kind == Node::kRepeat && n.max < 0 && NullableNode(n.children[0])) {
        p.Fail("a repetition (*, +, {n,}) of something that can match nothing");
      }
      for (const Node& c : n.children) Walk(c, p);
    }
    static bool NullableNode(const Node& n) {
      switch (n.kind) {
        case Node::kEmpty:
        case Node::kLook:
          return true;
        case Node::kChar:
        case Node::kClass:
        case Node::kAny:
          return false;
        case Node::kSeq:
          for (const Node& c : n.children) {
            if (!NullableNode(c)) return false;
          }
          return true;
        case Node::kAlt:
          for (const Node& c : n.children) {
            if (NullableNode(c)) return true;
          }
          return false;
        case Node::kRepeat:
          return n.min == 0 || NullableNode(n.children[0]);
        case Node::kAtomic:
          return NullableNode(n.children[0]);
      }
      return true;
    }
  };
  Check::Walk(root, parser);
  // Each top-level alternative is a program of its own (see Branch): trying
  // them in order is what the alternation's priority means.
  std::vector<const Node*> alternatives;
  if (root.kind == Node::kAlt) {
    for (const Node& c : root.children) alternatives.push_back(&c);
  } else {
    alternatives.push_back(&root);
  }
  for (const Node* alt : alternatives) {
    const int pc = static_cast<int>(program_.size());
    Compile(*alt);
    Emit({Op::kMatch});
    branches_.push_back({pc, First(*alt)});
  }
}

Regex::FirstSet Regex::First(const Node& node) const {
  FirstSet f;
  switch (node.kind) {
    case Node::kEmpty:
    case Node::kLook:
      f.empty = true;
      return f;
    case Node::kChar:
      if (node.c < 128) {
        f.ascii[node.c >> 6] |= uint64_t{1} << (node.c & 63);
        if (node.icase && ((node.c | 32) >= 'a' && (node.c | 32) <= 'z')) {
          const uint32_t other_case = node.c ^ 32;
          f.ascii[other_case >> 6] |= uint64_t{1} << (other_case & 63);
          f.other = true;  // the Unicode folds of s and k
        }
      } else {
        f.other = true;
      }
      return f;
    case Node::kClass: {
      const CharClass& c = classes_[static_cast<size_t>(node.cls)];
      f.ascii[0] = c.ascii[0];
      f.ascii[1] = c.ascii[1];
      f.other = true;
      return f;
    }
    case Node::kAny:
      f.ascii[0] = f.ascii[1] = ~uint64_t{0};
      f.other = true;
      return f;
    case Node::kSeq: {
      f.empty = true;
      for (const Node& c : node.children) {
        const FirstSet g = First(c);
        f.ascii[0] |= g.ascii[0];
        f.ascii[1] |= g.ascii[1];
        f.other = f.other || g.other;
        if (!g.empty) {
          f.empty = false;
          break;
        }
      }
      return f;
    }
    case Node::kAlt:
      for (const Node& c : node.children) {
        const FirstSet g = First(c);
        f.ascii[0] |= g.ascii[0];
        f.ascii[1] |= g.ascii[1];
        f.other = f.other || g.other;
        f.empty = f.empty || g.empty;
      }
      return f;
    case Node::kRepeat:
    case Node::kAtomic:
      f = First(node.children[0]);
      if (node.kind == Node::kRepeat && node.min == 0) f.empty = true;
      return f;
  }
  f.empty = true;
  return f;
}

int Regex::Emit(Inst inst) {
  // Counted repetitions are unrolled: nested ones could make a program of
  // billions of instructions.
  if (program_.size() >= kMaxProgram) {
    throw UserError(what_ + ": regex is not supported: it compiles to over " + std::to_string(kMaxProgram) +
                    " instructions (nested {n,m} repetitions)");
  }
  program_.push_back(inst);
  return static_cast<int>(program_.size() - 1);
}

void Regex::Compile(const Node& node) {
  switch (node.kind) {
    case Node::kEmpty:
      return;
    case Node::kChar: {
      Inst inst{Op::kChar};
      inst.c = node.c;
      inst.flag = node.icase;
      Emit(inst);
      return;
    }
    case Node::kClass: {
      Inst inst{Op::kClass};
      inst.c = static_cast<uint32_t>(node.cls);
      Emit(inst);
      return;
    }
    case Node::kAny:
      Emit({Op::kAny});
      return;
    case Node::kSeq:
      for (const Node& c : node.children) Compile(c);
      return;
    case Node::kAlt: {
      // split L1, next; L1: a; jmp end; next: split L2, next2; ... last: z
      std::vector<int> jumps;
      for (size_t k = 0; k < node.children.size(); ++k) {
        if (k + 1 < node.children.size()) {
          const int split = Emit({Op::kSplit});
          program_[static_cast<size_t>(split)].x = split + 1;
          Compile(node.children[k]);
          jumps.push_back(Emit({Op::kJmp}));
          program_[static_cast<size_t>(split)].y = static_cast<int>(program_.size());
        } else {
          Compile(node.children[k]);
        }
      }
      for (int j : jumps) program_[static_cast<size_t>(j)].x = static_cast<int>(program_.size());
      return;
    }
    case Node::kLook:
    case Node::kAtomic: {
      // The body runs as a sub-program of its own (ending in kMatch), placed
      // inline and jumped over.
      Inst inst{node.kind == Node::kLook ? Op::kLook : Op::kAtomic};
      inst.flag = node.negative;
      const int at = Emit(inst);
      const int jump = Emit({Op::kJmp});
      program_[static_cast<size_t>(at)].x = static_cast<int>(program_.size());
      Compile(node.children[0]);
      Emit({Op::kMatch});
      program_[static_cast<size_t>(jump)].x = static_cast<int>(program_.size());
      return;
    }
    case Node::kRepeat: {
      const Node& body = node.children[0];
      if (node.possessive) {
        Node greedy = node;
        greedy.possessive = false;
        Node atomic;
        atomic.kind = Node::kAtomic;
        atomic.children.push_back(std::move(greedy));
        Compile(atomic);
        return;
      }
      for (int k = 0; k < node.min; ++k) Compile(body);
      auto split = [&](int body_at, int exit_at) -> Inst {
        Inst s{Op::kSplit};
        s.x = node.greedy ? body_at : exit_at;
        s.y = node.greedy ? exit_at : body_at;
        return s;
      };
      if (node.max < 0) {
        const int loop = Emit({Op::kSplit});
        Compile(body);
        Inst back{Op::kJmp};
        back.x = loop;
        Emit(back);
        program_[static_cast<size_t>(loop)] = split(loop + 1, static_cast<int>(program_.size()));
        return;
      }
      std::vector<int> splits;
      for (int k = node.min; k < node.max; ++k) {
        splits.push_back(Emit({Op::kSplit}));
        Compile(body);
      }
      const int exit_at = static_cast<int>(program_.size());
      for (int s : splits) program_[static_cast<size_t>(s)] = split(s + 1, exit_at);
      return;
    }
  }
}

bool Regex::Run(int start_pc, std::string_view text, size_t start_pos, size_t* end) const {
  // Backtracking over (pc, pos) pairs; the stack is per thread and shared by
  // nested runs (lookahead, atomic groups), each popping only its own part.
  thread_local std::vector<std::pair<int, size_t>> stack;
  const size_t base = stack.size();
  struct PopOnExit {  // on every return, and when the step limit throws
    size_t base;
    ~PopOnExit() { stack.resize(base); }
  } pop_on_exit{base};
  int pc = start_pc;
  size_t pos = start_pos;
  const size_t n = text.size();
  int64_t steps = 0;
  // The unit at pos, decoded (ASCII without a call).
  auto unit = [&](int* len) -> uint32_t {
    const auto b = static_cast<unsigned char>(text[pos]);
    if (b < 0x80) {
      *len = 1;
      return b;
    }
    return unicode::DecodeUtf8(text, pos, len);
  };
  while (true) {
    if (++steps > kMaxSteps) {
      throw UserError(what_ + ": regex is not supported: over " + std::to_string(kMaxSteps) +
                      " backtracking steps for one match (a pattern that backtracks exponentially)");
    }
    const Inst& inst = program_[static_cast<size_t>(pc)];
    bool ok = true;
    switch (inst.op) {
      case Op::kChar:
      case Op::kClass:
      case Op::kAny: {
        ok = pos < n;
        if (!ok) break;
        int len;
        const uint32_t cp = unit(&len);
        if (inst.op == Op::kChar) {
          ok = cp == inst.c || (inst.flag && EqualsFolded(cp, inst.c));
        } else if (inst.op == Op::kClass) {
          ok = classes_[inst.c].Matches(cp);
        }
        if (ok) ++pc, pos += static_cast<size_t>(len);
        break;
      }
      case Op::kSplit:
        stack.emplace_back(inst.y, pos);
        pc = inst.x;
        break;
      case Op::kJmp:
        pc = inst.x;
        break;
      case Op::kMatch:
        *end = pos;
        return true;
      case Op::kLook: {
        size_t ignored;
        ok = Run(inst.x, text, pos, &ignored) != inst.flag;
        if (ok) ++pc;
        break;
      }
      case Op::kAtomic: {
        size_t after;
        ok = Run(inst.x, text, pos, &after);
        if (ok) ++pc, pos = after;
        break;
      }
    }
    if (ok) continue;
    if (stack.size() == base) return false;
    pc = stack.back().first;
    pos = stack.back().second;
    stack.pop_back();
  }
}

bool Regex::Find(std::string_view text, size_t from, size_t* begin, size_t* end) const {
  for (size_t start = from; start < text.size();) {
    int len = 1;
    const auto b = static_cast<unsigned char>(text[start]);
    const uint32_t cp = b < 0x80 ? b : unicode::DecodeUtf8(text, start, &len);
    for (const Branch& branch : branches_) {
      if (!branch.first.Allows(cp)) continue;
      size_t e;
      if (Run(branch.pc, text, start, &e)) {
        if (e > start) {
          *begin = start;
          *end = e;
          return true;
        }
        break;  // an empty match here: look further on
      }
    }
    start += static_cast<size_t>(len);
  }
  return false;
}

bool Regex::MatchesPrefix(std::string_view text, size_t* match_bytes) const {
  for (const Branch& branch : branches_) {
    if (Run(branch.pc, text, 0, match_bytes)) return true;
  }
  return false;
}

}  // namespace llmplan::data
