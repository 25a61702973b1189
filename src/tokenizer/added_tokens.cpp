// Added-token parsing and matching (see added_tokens.h).
#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer {
namespace {

constexpr std::string_view kFile = "tokenizer.json";

// The \w of Rust's regex crate, which tokenizers uses for single_word: alphabetic, marks, decimal digits, connector
// punctuation and the two joiners.
bool is_word_char(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The first / last code point of valid UTF-8 text.
char32_t first_codepoint(std::string_view s) {
  return utf8_step(s).codepoint;
}
char32_t last_codepoint(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return utf8_step(s.substr(i)).codepoint;
}

// Start of the run of whitespace that ends `s` (s.size() if none).
size_t trailing_space_start(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t j = i - 1;
    while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
    if (!is_unicode_space(utf8_step(s.substr(j)).codepoint, false)) break;
    i = j;
  }
  return i;
}

// Length of the run of whitespace that starts `s`.
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Step step = utf8_step(s.substr(i));
    if (!is_unicode_space(step.codepoint, false)) break;
    i += step.length;
  }
  return i;
}

}  // namespace

std::vector<AddedToken> parse_added_tokens(const nlohmann::json& list) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  PLUMB_CHECK(list.is_array(), "{}: added_tokens must be a list", kFile);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = field_path("added_tokens", i);
    const nlohmann::json& t = list[i];
    const nlohmann::json& id = json_member(t, "id", kFile, path);
    PLUMB_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t{1} << 30),
                "{}: {}.id must be a non-negative integer", kFile, path);
    AddedToken token;
    token.id = id.get<int32_t>();
    token.content = json_string(t, "content", kFile, path);
    utf8_require_valid(token.content, fmt::format("{}: {}.content", kFile, path));
    token.single_word = json_bool(t, "single_word", false, kFile, path);
    token.lstrip = json_bool(t, "lstrip", false, kFile, path);
    token.rstrip = json_bool(t, "rstrip", false, kFile, path);
    token.normalized = json_bool(t, "normalized", !json_bool(t, "special", false, kFile, path), kFile, path);
    token.special = json_bool(t, "special", false, kFile, path);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;  // an empty token can never be matched
    int32_t node = 0;
    for (unsigned char b : p) {
      auto it = children_[node].find(b);
      if (it == children_[node].end()) {
        const auto child = static_cast<int32_t>(children_.size());
        children_[node].emplace(b, child);
        children_.emplace_back();
        terminal_.push_back(-1);
        node = child;
      } else {
        node = it->second;
      }
    }
    // For equal patterns the first one wins, as the first-added pattern does in the Aho-Corasick automaton.
    if (terminal_[node] < 0) terminal_[node] = static_cast<int32_t>(i);
    first_byte_[static_cast<unsigned char>(p[0])] = true;
  }
}

std::pair<int, size_t> AddedTokenMatcher::longest_at(std::string_view text, size_t at) const {
  std::pair<int, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    auto it = children_[node].find(static_cast<unsigned char>(text[i]));
    if (it == children_[node].end()) break;
    node = it->second;
    if (terminal_[node] >= 0) best = {terminal_[node], i + 1 - at};
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  size_t start_offset = 0;  // end of the last emitted segment
  size_t at = 0;
  while (at < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[at])]) {
      ++at;
      continue;
    }
    const auto [index, length] = longest_at(text, at);
    if (index < 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = at, stop = at + length;
    at = stop;  // matches never overlap: the search resumes after this one, before any rstrip
    if (token.single_word) {
      const bool space_before = start == 0 || !is_word_char(last_codepoint(text.substr(0, start)));
      const bool space_after = stop == text.size() || !is_word_char(first_codepoint(text.substr(stop)));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace plumb::tokenizer
