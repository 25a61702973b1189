#include "grammar/text_rules.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace plumb::grammar {

namespace {

// `r` less the surrogates, which UTF-8 cannot encode.
Ranges encodable(const Ranges& r) {
  Ranges out;
  for (const auto& [lo, hi] : normalized(r)) {
    if (lo < 0xD800) out.push_back({lo, std::min<uint32_t>(hi, 0xD7FF)});
    if (hi > 0xDFFF) out.push_back({std::max<uint32_t>(lo, 0xE000), hi});
  }
  return out;
}

// The byte sequences of UTF-8 encoding the code points lo..hi, each a run of byte ranges.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  for (uint32_t limit : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= limit && hi > limit) {
      utf8_sequences(lo, limit, out);
      utf8_sequences(limit + 1, hi, out);
      return;
    }
  }
  const int n = hi < 0x80 ? 1 : hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  // Split until, below each byte, lo and hi either agree or span every continuation value: then the range is a
  // product of one byte range per position.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      utf8_sequences(lo, lo | m, out);
      utf8_sequences((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      utf8_sequences(lo, (hi & ~m) - 1, out);
      utf8_sequences(hi & ~m, hi, out);
      return;
    }
  }
  auto encode = [n](uint32_t cp) {
    std::vector<uint8_t> b(static_cast<size_t>(n));
    for (int i = n - 1; i > 0; --i, cp >>= 6) b[static_cast<size_t>(i)] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    b[0] = static_cast<uint8_t>(n == 1 ? cp : (0xF00u >> n) | cp);
    return b;
  };
  const std::vector<uint8_t> a = encode(lo), b = encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

}  // namespace

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalized(r)) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

int64_t next_code_point(std::string_view text, size_t& pos) {
  if (pos >= text.size()) return -1;
  const auto b = static_cast<uint8_t>(text[pos]);
  const size_t n = b < 0x80 ? 1 : b >= 0xF8 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
  if (n == 0 || pos + n > text.size()) return -1;
  uint32_t cp = n == 1 ? b : b & (0x7Fu >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto c = static_cast<uint8_t>(text[pos + i]);
    if ((c & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (c & 0x3Fu);
  }
  pos += n;
  return cp;
}

int hex_value(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

std::string utf8(uint32_t cp) {
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  const size_t n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  std::string out(n, '\0');
  for (size_t i = n - 1; i > 0; --i, cp >>= 6) out[i] = static_cast<char>(0x80 | (cp & 0x3F));
  out[0] = static_cast<char>((0xF00u >> n) | cp);
  return out;
}

Item TextRules::set(const Ranges& ranges) {
  const Ranges r = encodable(ranges);
  PLUMB_CHECK(!r.empty(), "{}: a class that matches no character", where_);
  std::vector<Sequence> alternatives;
  ByteSet ascii;
  auto escaped = [&](uint32_t cp) {
    static const char* const kShort[] = {"\\b", "\\t", "\\n", nullptr, "\\f", "\\r"};
    if (cp == '"') return std::string("\\\"");
    if (cp == '\\') return std::string("\\\\");
    if (cp >= 8 && cp <= 13 && kShort[cp - 8]) return std::string(kShort[cp - 8]);
    return fmt::format("\\u{:04x}", cp);
  };
  for (auto [lo, hi] : r) {
    for (; lo <= hi && lo < 0x80; ++lo) {
      if (text_ == RegexText::kJsonString && (lo < 0x20 || lo == '"' || lo == '\\')) {
        Sequence e;
        append_literal(e, escaped(lo));
        alternatives.push_back(std::move(e));
      } else {
        ascii.set(lo);
      }
    }
    if (lo > hi) continue;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> sequences;
    utf8_sequences(lo, hi, sequences);
    for (const auto& seq : sequences) {
      Sequence s;
      for (const auto& [a, b] : seq) s.push_back(bytes_item(byte_range(a, b)));
      alternatives.push_back(std::move(s));
    }
  }
  if (ascii.any()) {
    if (alternatives.empty()) return bytes_item(ascii);
    alternatives.push_back({bytes_item(ascii)});
  }
  if (alternatives.size() == 1 && alternatives[0].size() == 1) return alternatives[0][0];
  return rule_item(builder_.rule("pattern character", std::move(alternatives)));
}

Sequence TextRules::repeat(const Item& unit, bool nullable, int64_t min, int64_t max) {
  PLUMB_CHECK(max >= 0 || !nullable, "{}: a repeated part that can match nothing ('(a*)*', '(a|)+') is not supported",
              where_);
  Sequence s;
  for (int64_t i = 0; i < min; ++i) append(s, {unit});
  if (max < 0) {
    const int32_t loop = builder_.add_rule("repeat");
    builder_.add_alternative(loop, {});
    builder_.add_alternative(loop, {unit, rule_item(loop)});
    s.push_back(rule_item(loop));
    return s;
  }
  int32_t optional = -1;
  for (int64_t i = min; i < max; ++i) {
    Sequence with{unit};
    if (optional >= 0) with.push_back(rule_item(optional));
    optional = builder_.rule("repeat", {{}, with});
  }
  if (optional >= 0) s.push_back(rule_item(optional));
  return s;
}

void TextRules::append(Sequence& s, const Sequence& more) {
  s.insert(s.end(), more.begin(), more.end());
  items_ += more.size();
  PLUMB_CHECK(items_ <= kMaxItems, "{}: too large (its grammar passes {} items)", where_, kMaxItems);
}

}  // namespace plumb::grammar
