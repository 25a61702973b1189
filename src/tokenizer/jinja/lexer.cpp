// Chat-template lexer (see lexer.h). Mirrors jinja2/lexer.py: the root state looks for the next "{{", "{%" or "{#";
// the text before it is trimmed by "-" (all whitespace) or by lstrip_blocks (indentation before a block or comment
// tag on its own line); a block or comment end swallows one newline (trim_blocks) or, with "-", all whitespace.
#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer::jinja {
namespace {

enum class TagKind { kVariable, kBlock, kComment };

// Python's str.isspace() for the code point at s[i], returning its length in bytes (0 if not whitespace).
size_t python_space_at(std::string_view s, size_t i) {
  const Utf8Step step = utf8_step(s.substr(i));
  return step.status == Utf8Status::kComplete && is_unicode_space(step.codepoint, true) ? step.length : 0;
}

std::string_view rstrip_python_space(std::string_view s) {
  while (!s.empty()) {
    size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (python_space_at(s, start) == 0) break;
    s = s.substr(0, start);
  }
  return s;
}

size_t skip_python_space(std::string_view s, size_t i) {
  while (i < s.size()) {
    const size_t n = python_space_at(s, i);
    if (n == 0) break;
    i += n;
  }
  return i;
}

bool all_python_space(std::string_view s) {
  return !s.empty() && skip_python_space(s, 0) == s.size();
}

// Python's "unicode-escape" decoding of a string literal's body, which is what Jinja applies to literals.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char e = body[++i];
    auto hex = [&](size_t digits) {
      const std::string h(body.substr(i + 1, digits));
      PLUMB_CHECK(h.size() == digits && std::all_of(h.begin(), h.end(), [](char c) { return std::isxdigit(c); }),
                  "chat template line {}: bad \\{} escape in a string", line, e);
      i += digits;
      const auto cp = static_cast<char32_t>(std::stoul(h, nullptr, 16));
      PLUMB_CHECK(cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF), "chat template line {}: bad code point escape", line);
      utf8_append(out, cp);
    };
    switch (e) {
      case '\n':
        break;  // a backslash-newline continues the line
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (e >= '0' && e <= '7') {
          int value = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            value = value * 8 + (body[++i] - '0');
          }
          utf8_append(out, static_cast<char32_t>(value));
        } else {
          out += '\\';  // unknown escapes stay as written
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t start = find_tag(pos_);
      if (start == std::string::npos) {
        emit_text(std::string_view(src_).substr(pos_));
        break;
      }
      const char k = src_[start + 1];
      const TagKind kind = k == '{' ? TagKind::kVariable : k == '%' ? TagKind::kBlock : TagKind::kComment;
      const char sign =
          start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : '\0';
      std::string_view text = std::string_view(src_).substr(pos_, start - pos_);
      const int text_newlines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      text = trim_before_tag(text, sign, kind != TagKind::kVariable);
      emit_text(text);
      line_ += text_newlines - static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      pos_ = start + 2 + (sign ? 1 : 0);
      if (kind == TagKind::kComment) {
        lex_comment();
      } else if (kind == TagKind::kBlock && lex_raw()) {
        continue;
      } else {
        lex_tag(kind);
      }
    }
    tokens_.push_back({TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  std::string_view trim_before_tag(std::string_view text, char sign, bool block_or_comment) const {
    if (sign == '-') return rstrip_python_space(text);
    if (sign == '+' || !block_or_comment) return text;
    const size_t line_start = text.rfind('\n') == std::string_view::npos ? 0 : text.rfind('\n') + 1;
    if ((line_start > 0 || line_starting_) && all_python_space(text.substr(line_start))) {
      return text.substr(0, line_start);
    }
    return text;
  }

  void emit_text(std::string_view text) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, std::string(text), line_});
    line_ += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  }

  // After a block or comment end at src_[at..]: "-" swallows all whitespace, "+" nothing, else one newline.
  size_t after_block_end(size_t end_begin, char sign, size_t close_length) {
    size_t p = end_begin + (sign ? 1 : 0) + close_length;
    if (sign == '-') {
      p = skip_python_space(src_, p);
    } else if (sign != '+' && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > 0 && src_[p - 1] == '\n';
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(end_begin),
                                         src_.begin() + static_cast<std::ptrdiff_t>(p), '\n'));
    return p;
  }

  void lex_comment() {
    const int line = line_;
    const size_t close = src_.find("#}", pos_);
    PLUMB_CHECK(close != std::string::npos, "chat template line {}: missing end of comment tag", line);
    size_t end_begin = close;
    char sign = '\0';
    if (close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+')) {
      sign = src_[close - 1];
      end_begin = close - 1;
    }
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                         src_.begin() + static_cast<std::ptrdiff_t>(end_begin), '\n'));
    pos_ = after_block_end(end_begin, sign, 2);
  }

  // {% raw %}...{% endraw %}: the body is text, untouched except for the usual trimming around the endraw tag.
  bool lex_raw() {
    size_t p = skip_python_space(src_, pos_);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_python_space(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      p = skip_python_space(src_, p + 3);
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                         src_.begin() + static_cast<std::ptrdiff_t>(p), '\n'));
    for (size_t tag = find_tag(p); tag != std::string::npos; tag = find_tag(tag + 1)) {
      if (src_[tag + 1] != '%') continue;
      const char sign = src_[tag + 2] == '-' || src_[tag + 2] == '+' ? src_[tag + 2] : '\0';
      size_t q = skip_python_space(src_, tag + 2 + (sign ? 1 : 0));
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = skip_python_space(src_, q + 6);
      const char end_sign = src_[q] == '-' || src_[q] == '+' ? src_[q] : '\0';
      if (src_.compare(q + (end_sign ? 1 : 0), 2, "%}") != 0) continue;
      std::string_view body = std::string_view(src_).substr(p, tag - p);
      const int body_newlines = static_cast<int>(std::count(body.begin(), body.end(), '\n'));
      body = trim_before_tag(body, sign, true);
      emit_text(body);
      line_ += body_newlines - static_cast<int>(std::count(body.begin(), body.end(), '\n'));
      pos_ = after_block_end(q, end_sign, 2);
      return true;
    }
    PLUMB_FAIL("chat template line {}: missing end of raw directive", line_);
  }

  void lex_tag(TagKind kind) {
    const int begin_line = line_;
    tokens_.push_back({kind == TagKind::kBlock ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", line_});
    const std::string close = kind == TagKind::kBlock ? "%}" : "}}";
    std::vector<char> brackets;  // an end tag only counts outside (), [] and {}
    while (true) {
      PLUMB_CHECK(pos_ < src_.size(), "chat template line {}: unexpected end of template, expected '{}'", begin_line,
                  close);
      if (brackets.empty()) {
        const bool minus = src_[pos_] == '-' && src_.compare(pos_ + 1, 2, close) == 0;
        const bool plus = kind == TagKind::kBlock && src_[pos_] == '+' && src_.compare(pos_ + 1, 2, close) == 0;
        if (minus || plus || src_.compare(pos_, 2, close) == 0) {
          tokens_.push_back({kind == TagKind::kBlock ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", line_});
          if (kind == TagKind::kBlock) {
            pos_ = after_block_end(pos_, minus ? '-' : plus ? '+' : '\0', 2);
          } else {
            const size_t end = pos_ + (minus ? 1 : 0) + 2;
            pos_ = minus ? skip_python_space(src_, end) : end;
            line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(end),
                                                 src_.begin() + static_cast<std::ptrdiff_t>(pos_), '\n'));
            line_starting_ = src_[pos_ - 1] == '\n';
          }
          return;
        }
      }
      lex_expression_token(brackets);
    }
  }

  void lex_expression_token(std::vector<char>& brackets) {
    const char c = src_[pos_];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      line_ += c == '\n';
      ++pos_;
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t p = pos_;
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
      bool is_float = false;
      if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
        is_float = true;
        for (++p; p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_');) ++p;
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
          is_float = true;
          for (p = q; p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]));) ++p;
        }
      }
      std::string number = src_.substr(pos_, p - pos_);
      number.erase(std::remove(number.begin(), number.end(), '_'), number.end());
      tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInteger, number, line_});
      pos_ = p;
      return;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t p = pos_;
      while (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
      tokens_.push_back({TokenType::kName, src_.substr(pos_, p - pos_), line_});
      pos_ = p;
      return;
    }
    if (c == '\'' || c == '"') {
      size_t p = pos_ + 1;
      while (p < src_.size() && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
      PLUMB_CHECK(p < src_.size(), "chat template line {}: unterminated string literal", line_);
      const std::string_view body = std::string_view(src_).substr(pos_ + 1, p - pos_ - 1);
      tokens_.push_back({TokenType::kString, unescape(body, line_), line_});
      line_ += static_cast<int>(std::count(body.begin(), body.end(), '\n'));
      pos_ = p + 1;
      return;
    }
    static const char* const kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoCharOps) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back({TokenType::kOperator, op, line_});
        pos_ += 2;
        return;
      }
    }
    PLUMB_CHECK(std::string_view("+-/*%~[](){}.,:|=<>;").find(c) != std::string_view::npos,
                "chat template line {}: unexpected character '{}'", line_, c);
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      PLUMB_CHECK(!brackets.empty() && brackets.back() == c, "chat template line {}: unexpected '{}'", line_, c);
      brackets.pop_back();
    }
    tokens_.push_back({TokenType::kOperator, std::string(1, c), line_});
    ++pos_;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

// Jinja treats \r\n and \r as \n and drops one trailing newline (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize_template(std::string_view source) {
  utf8_require_valid(source, "chat template");
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace plumb::tokenizer::jinja
