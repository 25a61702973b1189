// PCRE2-backed pre-tokenizer regexes (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer {
namespace {

// Oniguruma's Unicode \s: the White_Space code points.
constexpr std::string_view kSpaceSet =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's Unicode \w: Letter | Mark | Number | Connector_Punctuation.
constexpr std::string_view kWordSet = "\\p{L}\\p{M}\\p{N}\\p{Pc}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string regex_to_pcre2(std::string_view pattern, std::string_view field) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      const bool space = e == 's' || e == 'S';
      if (space || e == 'w' || e == 'W') {
        const std::string_view set = space ? kSpaceSet : kWordSet;
        const bool negated = e == 'S' || e == 'W';
        PLUMB_CHECK(!(in_class && negated), "tokenizer.json: {}: '\\{}' inside a character class is not supported",
                    field, e);
        if (in_class) {
          out.append(set);
        } else {
          out.append(negated ? "[^" : "[").append(set).append("]");
        }
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    PLUMB_CHECK(!(in_class && c == '['), "tokenizer.json: {}: nested character classes are not supported", field);
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, std::string_view field) : impl_(std::make_unique<Impl>()) {
  utf8_require_valid(pattern, fmt::format("tokenizer.json: {}", field));
  const std::string translated = regex_to_pcre2(pattern, field);
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), PCRE2_UTF | PCRE2_UCP,
                              &error, &offset, nullptr);
  PLUMB_CHECK(impl_->code != nullptr, "tokenizer.json: {}: invalid regex '{}': {} (at offset {})", field, pattern,
              pcre2_message(error), offset);
  // The JIT is an optimisation only: matching works the same without it (e.g. where the platform lacks it).
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  // One match-data block per thread, reused across calls: encode() runs concurrently and per-word allocation costs.
  struct MatchData {
    pcre2_match_data* data = pcre2_match_data_create(4, nullptr);
    ~MatchData() { pcre2_match_data_free(data); }
  };
  thread_local MatchData match;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // Oniguruma's iteration: an empty match right where the previous match ended is skipped by moving the search on
  // one character; any other match, empty or not, is reported and the search resumes at its end.
  size_t search_from = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (search_from <= text.size()) {
    // The text was validated once by the caller, so PCRE2 need not re-check it at every start offset.
    const int rc = pcre2_match(impl_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    PLUMB_CHECK(rc >= 0, "pre-tokenizer regex failed: {}", pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin == end && have_last && last_match_end == end) {
      search_from += search_from < text.size() ? utf8_step(text.substr(search_from)).length : 1;
      continue;
    }
    out.emplace_back(begin, end);
    search_from = end;
    have_last = true;
    last_match_end = end;
  }
}

}  // namespace plumb::tokenizer
