// A compiled pre-tokenizer regex (PCRE2, UTF + Unicode properties, JIT-compiled). Hugging Face runs these patterns
// with Oniguruma, whose \s and \w differ from PCRE2's; the pattern is rewritten on construction so that both classes
// mean what they mean in Oniguruma (White_Space, and Letter|Mark|Number|Connector_Punctuation).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace plumb::tokenizer {

class Regex {
 public:
  // Compiles `pattern`; throws plumb::Error naming `field` (e.g. "pre_tokenizer.pretokenizers[0].pattern.Regex")
  // if it is invalid or uses a construct that cannot be matched the way Oniguruma matches it.
  Regex(std::string_view pattern, std::string_view field);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of all successive non-overlapping matches in valid UTF-8 `text`, like
  // Oniguruma's find_iter (an empty match advances the search by one character).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The pattern with Oniguruma's meaning of \s, \S, \w and \W spelled out for PCRE2 (exposed for tests).
std::string regex_to_pcre2(std::string_view pattern, std::string_view field);

}  // namespace plumb::tokenizer
