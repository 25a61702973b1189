// Python str operations on UTF-8 (see strings.h).
#include "tokenizer/jinja/strings.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer::jinja {

int64_t decimal_int64(const std::string& digits, std::string_view what) {
  int64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [stop, error] = std::from_chars(digits.data(), end, value);
  PLUMB_CHECK(error == std::errc() && stop == end && !digits.empty(), "{} {} is not an integer that fits 64 bits", what,
              digits);
  return value;
}
namespace {

bool is_space(char32_t cp) {
  return is_unicode_space(cp, true);
}

utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
bool is_cased_upper(char32_t cp) {
  return category(cp) == UTF8PROC_CATEGORY_LU || category(cp) == UTF8PROC_CATEGORY_LT;
}
bool is_cased_lower(char32_t cp) {
  return category(cp) == UTF8PROC_CATEGORY_LL;
}
bool is_cased(char32_t cp) {
  return is_cased_upper(cp) || is_cased_lower(cp);
}
char32_t to_upper(char32_t cp) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_lower(char32_t cp) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_title(char32_t cp) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

}  // namespace

int64_t codepoint_count(std::string_view s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

std::string python_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::vector<char32_t> cps = utf8_codepoints(s);
  const std::vector<char32_t> set = chars ? utf8_codepoints(*chars) : std::vector<char32_t>();
  auto strip = [&](char32_t cp) { return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_space(cp); };
  size_t lo = 0, hi = cps.size();
  while (left && lo < hi && strip(cps[lo])) ++lo;
  while (right && hi > lo && strip(cps[hi - 1])) --hi;
  return utf8_from_codepoints(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(lo),
                                                    cps.begin() + static_cast<std::ptrdiff_t>(hi)));
}

std::vector<std::string> python_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    PLUMB_CHECK(!sep->empty(), "empty separator");
    if (!from_right) {
      size_t start = 0;
      for (size_t at = s.find(*sep);
           at != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit);
           at = s.find(*sep, start)) {
        parts.push_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      parts.push_back(s.substr(start));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string::npos) break;
      parts.push_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  // Whitespace splitting: runs of whitespace separate, leading/trailing whitespace yields nothing.
  std::vector<char32_t> cps = utf8_codepoints(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    size_t j = i;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t end = cps.size();
      while (end > i && is_space(cps[end - 1])) --end;
      j = end;
    } else {
      while (j < cps.size() && !is_space(cps[j])) ++j;
    }
    std::vector<char32_t> word(cps.begin() + static_cast<std::ptrdiff_t>(i),
                               cps.begin() + static_cast<std::ptrdiff_t>(j));
    if (from_right) std::reverse(word.begin(), word.end());
    parts.push_back(utf8_from_codepoints(word));
    i = j;
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> python_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  const std::vector<char32_t> cps = utf8_codepoints(s);
  std::vector<char32_t> current;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool breaks = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                        c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!breaks) {
      current.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    lines.push_back(utf8_from_codepoints(current));
    current.clear();
  }
  if (!current.empty()) lines.push_back(utf8_from_codepoints(current));
  return lines;
}

std::string python_case(const std::string& s, std::string_view how) {
  std::vector<char32_t> cps = utf8_codepoints(s);
  bool previous_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    if (how == "upper") {
      cps[i] = to_upper(c);
    } else if (how == "lower") {
      cps[i] = to_lower(c);
    } else if (how == "swapcase") {
      cps[i] = is_cased_upper(c) ? to_lower(c) : is_cased_lower(c) ? to_upper(c) : c;
    } else if (how == "capitalize") {
      cps[i] = i == 0 ? to_title(c) : to_lower(c);
    } else {  // title: a cased character after an uncased one starts a word
      cps[i] = previous_cased ? to_lower(c) : to_title(c);
      previous_cased = is_cased(c);
    }
  }
  return utf8_from_codepoints(cps);
}

std::string python_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` between characters and at both ends
    const std::vector<char32_t> cps = utf8_codepoints(s);
    int64_t done = 0;
    for (char32_t cp : cps) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      utf8_append(out, cp);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  for (size_t at = s.find(old); at != std::string::npos && (count < 0 || done < count); at = s.find(old, start)) {
    out.append(s, start, at - start).append(with);
    start = at + old.size();
    ++done;
  }
  return out.append(s, start, std::string::npos);
}

int64_t python_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return codepoint_count(s) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

bool python_predicate_known(std::string_view name) {
  for (std::string_view known :
       {"isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal", "istitle"}) {
    if (name == known) return true;
  }
  return false;
}

bool python_predicate(const std::string& s, std::string_view name) {
  const std::vector<char32_t> cps = utf8_codepoints(s);
  if (cps.empty()) return false;
  auto all = [&](auto pred) { return std::all_of(cps.begin(), cps.end(), pred); };
  auto is_alpha = [](char32_t c) {
    const auto cat = category(c);
    return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
  };
  auto is_digit = [](char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; };
  auto is_numeric = [](char32_t c) {
    const auto cat = category(c);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
  };
  if (name == "isdigit" || name == "isdecimal") return all(is_digit);
  if (name == "isnumeric") return all(is_numeric);
  if (name == "isalpha") return all(is_alpha);
  if (name == "isalnum") return all([&](char32_t c) { return is_alpha(c) || is_numeric(c); });
  if (name == "isspace") return all(is_space);
  const bool any_cased = std::any_of(cps.begin(), cps.end(), is_cased);
  if (name == "isupper") return any_cased && all([](char32_t c) { return !is_cased_lower(c); });
  if (name == "islower") return any_cased && all([](char32_t c) { return !is_cased_upper(c); });
  return python_case(s, "title") == s && any_cased;  // istitle
}

}  // namespace plumb::tokenizer::jinja
