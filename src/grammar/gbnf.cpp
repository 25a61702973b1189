#include "grammar/gbnf.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/text_rules.h"

namespace plumb::grammar {

namespace {

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text), rules_(builder_, RegexText::kRaw, "the grammar") {}

  Grammar parse() {
    skip(true);
    while (!at_end()) {
      const size_t start = pos_;
      const std::string name = word();
      if (name.empty()) fail("a rule name");
      skip(false);
      if (t_.substr(pos_, 3) != "::=") fail(fmt::format("'::=' after the rule name '{}'", name));
      pos_ += 3;
      skip(true);
      const int32_t id = rule(name);
      if (!defined_.emplace(name, start).second) fail_at(start, fmt::format("rule '{}' is defined twice", name));
      for (Sequence& s : alternatives(false)) builder_.add_alternative(id, std::move(s));
      skip(false);
      if (!at_end() && peek() != '\n' && peek() != '\r') fail("the end of the line after a rule");
      skip(true);
    }
    for (const auto& [name, offset] : used_)
      if (!defined_.count(name)) fail_at(offset, fmt::format("rule '{}' is used but not defined", name));
    if (!defined_.count("root")) fail_at(pos_, "a rule named 'root' (the grammar has none)");
    return builder_.build(rule("root"));
  }

 private:
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    const auto line = 1 + std::count(t_.begin(), t_.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
    PLUMB_FAIL("GBNF line {}: {}", line, what);
  }
  [[noreturn]] void fail(const std::string& expected) const {
    fail_at(pos_, at_end() ? "expected " + expected + ", got the end" : "expected " + expected);
  }
  bool at_end() const { return pos_ >= t_.size(); }
  char peek() const { return at_end() ? '\0' : t_[pos_]; }
  bool eat(char c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }

  // Blanks and comments, and line ends where `newlines`.
  void skip(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else {
        return;
      }
    }
  }

  std::string word() {
    const size_t start = pos_;
    while (!at_end() && is_word(peek())) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }

  int32_t rule(const std::string& name) {
    const auto [it, added] = ids_.emplace(name, -1);
    if (added) it->second = builder_.add_rule("GBNF rule '" + name + "'");
    return it->second;
  }

  std::vector<Sequence> alternatives(bool nested) {
    std::vector<Sequence> out{sequence(nested)};
    while (eat('|')) {
      skip(true);
      out.push_back(sequence(nested));
    }
    return out;
  }

  Sequence sequence(bool nested) {
    Sequence s;
    for (skip(nested); !at_end() && peek() != '|' && peek() != ')' && peek() != '\n' && peek() != '\r'; skip(nested)) {
      Sequence atom_items = atom();
      skip(nested);
      int64_t min = 1, max = 1;
      if (eat('*')) {
        min = 0, max = -1;
      } else if (eat('+')) {
        max = -1;
      } else if (eat('?')) {
        min = 0;
      } else if (eat('{')) {
        min = peek() == ',' ? 0 : count();
        max = eat(',') ? (peek() == '}' ? -1 : count()) : min;
        if (!eat('}')) fail("'}' closing a repetition");
        if (max >= 0 && max < min) fail_at(pos_ - 1, "a repetition {m,n} with n < m");
      }
      if (min == 1 && max == 1) {
        rules_.append(s, atom_items);
        continue;
      }
      const Item unit = atom_items.size() == 1 ? atom_items[0] : rule_item(builder_.rule("GBNF group", {atom_items}));
      rules_.append(s, rules_.repeat(unit, false, min, max));
    }
    return s;
  }

  int64_t count() {
    int64_t n = 0;
    const size_t start = pos_;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + (t_[pos_++] - '0');
      if (n > kMaxRepeat) fail_at(start, fmt::format("a repetition count above {}", kMaxRepeat));
    }
    if (pos_ == start) fail("a repetition count");
    return n;
  }

  Sequence atom() {
    const char c = peek();
    if (c == '"') {
      ++pos_;
      Sequence s;
      while (!eat('"')) {
        if (at_end() || peek() == '\n') fail("'\"' closing the literal");
        append_literal(s, utf8(character(false)));
      }
      return s;
    }
    if (c == '[') {
      ++pos_;
      const bool negated = eat('^');
      Ranges r;
      while (!eat(']')) {
        if (at_end()) fail("']' closing the class");
        const uint32_t first = character(true);
        uint32_t last = first;
        if (peek() == '-' && pos_ + 1 < t_.size() && t_[pos_ + 1] != ']') {
          ++pos_;
          last = character(true);
          if (last < first) fail_at(pos_ - 1, "a class range out of order");
        }
        r.push_back({first, last});
      }
      return {rules_.set(negated ? complement(r) : normalized(r))};
    }
    if (c == '.') {
      ++pos_;
      return {rules_.set({{0, kMaxCodePoint}})};
    }
    if (c == '(') {
      ++pos_;
      skip(true);
      std::vector<Sequence> alts = alternatives(true);
      skip(true);
      if (!eat(')')) fail("')' closing the group");
      if (alts.size() == 1) return alts[0];
      return {rule_item(builder_.rule("GBNF group", std::move(alts)))};
    }
    if (is_word(c)) {
      const size_t start = pos_;
      const std::string name = word();
      used_.emplace(name, start);
      return {rule_item(rule(name))};
    }
    fail("a literal, a class, '.', a group or a rule name");
  }

  // One character of a literal or class, escapes decoded.
  uint32_t character(bool in_class) {
    if (peek() != '\\') {
      const int64_t cp = next_code_point(t_, pos_);
      if (cp < 0) fail("valid UTF-8");
      return static_cast<uint32_t>(cp);
    }
    const size_t start = pos_++;
    const char e = at_end() ? '\0' : t_[pos_++];
    switch (e) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
        return static_cast<uint8_t>(e);
      case 'x':
        return hex(start, 2);
      case 'u':
        return hex(start, 4);
      case 'U':
        return hex(start, 8);
      default:
        break;
    }
    if (in_class && e == '-') return '-';
    fail_at(start, fmt::format("an unknown escape '\\{}'", e));
  }

  uint32_t hex(size_t start, size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i, ++pos_) {
      const int d = at_end() ? -1 : hex_value(peek());
      if (d < 0) fail_at(start, "a hexadecimal escape without its digits");
      v = v << 4 | static_cast<uint32_t>(d);
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) fail_at(start, "an escape that is no Unicode character");
    return v;
  }

  std::string_view t_;
  size_t pos_ = 0;
  GrammarBuilder builder_;
  TextRules rules_;
  std::map<std::string, int32_t> ids_;
  std::map<std::string, size_t> defined_, used_;  // -> the offset of the first definition or use
};

}  // namespace

Grammar compile_gbnf(std::string_view text) {
  return Parser(text).parse();
}

}  // namespace plumb::grammar
