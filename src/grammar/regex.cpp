#include "grammar/regex.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace plumb::grammar {

namespace {

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262's WhiteSpace and LineTerminator.
const Ranges kSpace = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const Ranges kLineTerminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

struct Node {
  enum class Kind : uint8_t { kSet, kConcat, kAlternation, kRepeat };
  Kind kind = Kind::kConcat;
  Ranges set;                  // kSet
  std::vector<Node> children;  // kConcat, kAlternation; kRepeat: the one repeated
  int64_t min = 0, max = -1;   // kRepeat: max -1 is unbounded
  bool nullable() const {
    switch (kind) {
      case Kind::kSet:
        return false;
      case Kind::kConcat:
        return std::all_of(children.begin(), children.end(), [](const Node& c) { return c.nullable(); });
      case Kind::kAlternation:
        return std::any_of(children.begin(), children.end(), [](const Node& c) { return c.nullable(); });
      case Kind::kRepeat:
        return min == 0 || children[0].nullable();
    }
    return false;
  }
};

// A top-level alternative and its anchors.
struct Branch {
  Node node;
  bool starts = false, ends = false;
};

class Parser {
 public:
  Parser(std::string_view pattern, std::string_view where) : p_(pattern), where_(where) {}

  std::vector<Branch> parse() {
    std::vector<Branch> branches;
    do {
      Branch b;
      b.starts = eat('^');
      b.node = concat(true, &b.ends);
      branches.push_back(std::move(b));
    } while (eat('|'));
    if (at_end()) return branches;
    fail(peek() == ')' ? "an unmatched ')'" : "an unexpected character");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    PLUMB_FAIL("{}: {} at offset {} of the pattern", where_, what, offset);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return at_end() ? '\0' : p_[pos_]; }
  bool eat(char c) {
    if (at_end() || p_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  Node alternation() {
    Node alt{Node::Kind::kAlternation, {}, {}};
    do alt.children.push_back(concat(false, nullptr));
    while (eat('|'));
    return alt.children.size() == 1 ? std::move(alt.children[0]) : alt;
  }

  // Items up to '|', ')' or the end; at the top, a '$' just before one of those ends the branch.
  Node concat(bool top, bool* anchored_end) {
    Node seq{Node::Kind::kConcat, {}, {}};
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++pos_;
        if (top && (at_end() || peek() == '|')) {
          *anchored_end = true;
          break;
        }
        --pos_;
        fail("'$' inside the pattern (only at the end of a top-level alternative)");
      }
      if (peek() == '^') fail("'^' inside the pattern (only at the start of a top-level alternative)");
      seq.children.push_back(quantified(atom()));
    }
    return seq;
  }

  Node quantified(Node atom) {
    int64_t min = 0, max = -1;
    if (eat('*')) {
    } else if (eat('+')) {
      min = 1;
    } else if (eat('?')) {
      max = 1;
    } else if (peek() == '{') {
      ++pos_;
      min = max = number();
      if (eat(',')) max = peek() == '}' ? -1 : number();
      if (!eat('}')) fail("a '{' that is not a quantifier {n}, {n,} or {n,m} (write \\{ for the character)");
      if (max >= 0 && max < min) fail("a quantifier {n,m} with m < n");
    } else {
      return atom;
    }
    eat('?');  // lazy: the same texts
    if (std::string_view("*+?{").find(peek()) != std::string_view::npos && !at_end())
      fail("a quantifier after a quantifier");
    Node r{Node::Kind::kRepeat, {}, {}};
    r.children.push_back(std::move(atom));
    r.min = min;
    r.max = max;
    return r;
  }

  int64_t number() {
    const size_t start = pos_;
    int64_t n = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + (p_[pos_++] - '0');
      if (n > kMaxRepeat) fail(fmt::format("a count above {}", kMaxRepeat));
    }
    if (pos_ == start) fail("a '{' that is not a quantifier {n}, {n,} or {n,m} (write \\{ for the character)");
    return n;
  }

  static Node set(Ranges r) { return Node{Node::Kind::kSet, std::move(r), {}}; }

  Node atom() {
    const char c = peek();
    if (c == '(') {
      const size_t start = pos_++;
      if (eat('?')) {
        if (eat(':')) {
        } else if (peek() == '<' && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' && p_[pos_ + 1] != '!') {
          while (!at_end() && peek() != '>') ++pos_;
          if (!eat('>')) fail("an unterminated group name");
        } else {
          fail_at(start, "a lookaround assertion ('(?=', '(?!', '(?<=', '(?<!')");
        }
      }
      Node inner = alternation();
      if (!eat(')')) fail("an unterminated group");
      return inner;
    }
    if (c == '[') return set(character_class());
    if (c == '.') {
      ++pos_;
      return set(complement(kLineTerminators));
    }
    if (c == '\\') {
      ++pos_;
      return set(escape(false));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    if (c == ']' || c == '}') fail(fmt::format("an unescaped '{}'", c));
    const uint32_t cp = literal();
    return set({{cp, cp}});
  }

  // One UTF-8 character of the pattern.
  uint32_t literal() {
    const int64_t cp = next_code_point(p_, pos_);
    if (cp < 0) fail("invalid UTF-8");
    return static_cast<uint32_t>(cp);
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const int d = at_end() ? -1 : hex_value(peek());
      if (d < 0) fail("a hexadecimal escape without its digits");
      v = v << 4 | static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // After a '\': the characters it stands for.
  Ranges escape(bool in_class) {
    const size_t start = pos_ - 1;  // the '\\'
    if (at_end()) fail("a '\\' at the end");
    const char c = p_[pos_++];
    auto one = [](uint32_t cp) { return Ranges{{cp, cp}}; };
    switch (c) {
      case 'd':
        return kDigit;
      case 'D':
        return complement(kDigit);
      case 'w':
        return kWord;
      case 'W':
        return complement(kWord);
      case 's':
        return kSpace;
      case 'S':
        return complement(kSpace);
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case 'x':
        return one(hex(2));
      case 'u': {
        if (eat('{')) {
          const size_t first = pos_;
          uint32_t v = 0;
          while (!at_end() && peek() != '}' && pos_ - first < 6) v = v << 4 | hex(1);
          if (pos_ == first || !eat('}') || v > kMaxCodePoint) fail_at(start, "an invalid \\u{...} escape");
          return one(v);
        }
        uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDBFF && p_.substr(pos_, 2) == "\\u") {
          pos_ += 2;
          const uint32_t low = hex(4);
          if (low < 0xDC00 || low > 0xDFFF) fail_at(start, "a lone surrogate escape");
          v = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
        } else if (v >= 0xD800 && v <= 0xDFFF) {
          fail_at(start, "a lone surrogate escape");
        }
        return one(v);
      }
      case '0':
        if (peek() >= '0' && peek() <= '9') fail_at(start, "an octal escape");
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        fail_at(start, "a word boundary ('\\b')");
      case 'B':
        fail_at(start, "a word boundary ('\\B')");
      case 'p':
      case 'P':
        fail_at(start, "a Unicode property escape ('\\p', '\\P')");
      case 'k':
        fail_at(start, "a named back-reference ('\\k')");
      case 'c':
        fail_at(start, "a control escape ('\\c')");
      default:
        break;
    }
    if (c >= '1' && c <= '9') fail_at(start, "a back-reference");
    if (std::string_view("^$\\.*+?()[]{}|/").find(c) != std::string_view::npos || (in_class && c == '-'))
      return one(static_cast<uint8_t>(c));
    --pos_;
    fail_at(start, fmt::format("an unknown escape '\\{}'", c));
  }

  // After a '[': the class up to its ']'.
  Ranges character_class() {
    ++pos_;
    const bool negated = eat('^');
    Ranges r;
    while (!eat(']')) {
      if (at_end()) fail("an unterminated character class");
      Ranges first = class_atom();
      if (peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        Ranges last = class_atom();
        if (first.size() != 1 || first[0].first != first[0].second || last.size() != 1 ||
            last[0].first != last[0].second)
          fail("a range in a class with a class escape at one end");
        if (last[0].first < first[0].first) fail("a range in a class out of order");
        r.push_back({first[0].first, last[0].first});
      } else {
        r.insert(r.end(), first.begin(), first.end());
      }
    }
    if (r.empty() && !negated) fail("an empty class '[]', which matches nothing");
    return negated ? complement(r) : normalized(r);
  }

  Ranges class_atom() {
    if (eat('\\')) return escape(true);
    const uint32_t cp = literal();
    return {{cp, cp}};
  }

  std::string_view p_;
  std::string_view where_;
  size_t pos_ = 0;
};

class Emitter {
 public:
  explicit Emitter(TextRules& rules) : rules_(rules) {}

  Sequence emit(const Node& n) {
    Sequence s;
    switch (n.kind) {
      case Node::Kind::kSet:
        s.push_back(rules_.set(n.set));
        break;
      case Node::Kind::kConcat:
        for (const Node& c : n.children) rules_.append(s, emit(c));
        break;
      case Node::Kind::kAlternation: {
        std::vector<Sequence> alternatives;
        for (const Node& c : n.children) alternatives.push_back(emit(c));
        s.push_back(rule_item(rules_.builder().rule("pattern alternatives", std::move(alternatives))));
        break;
      }
      case Node::Kind::kRepeat: {
        Sequence unit = emit(n.children[0]);
        const Item one = unit.size() == 1 ? unit[0] : rule_item(rules_.builder().rule("pattern group", {unit}));
        s = rules_.repeat(one, n.children[0].nullable(), n.min, n.max);
        break;
      }
    }
    return s;
  }

  // Any characters at all, for an unanchored end.
  Sequence anything() { return rules_.repeat(rules_.set({{0, kMaxCodePoint}}), false, 0, -1); }

 private:
  TextRules& rules_;
};

}  // namespace

int32_t regex_rule(GrammarBuilder& builder, std::string_view pattern, RegexText text, bool search,
                   std::string_view where) {
  const std::vector<Branch> branches = Parser(pattern, where).parse();
  TextRules rules(builder, text, where);
  Emitter emitter(rules);
  std::vector<Sequence> alternatives;
  for (const Branch& b : branches) {
    Sequence s;
    if (search && !b.starts) s = emitter.anything();
    const Sequence body = emitter.emit(b.node);
    s.insert(s.end(), body.begin(), body.end());
    if (search && !b.ends) {
      const Sequence tail = emitter.anything();
      s.insert(s.end(), tail.begin(), tail.end());
    }
    alternatives.push_back(std::move(s));
  }
  return builder.rule("pattern", std::move(alternatives));
}

}  // namespace plumb::grammar
