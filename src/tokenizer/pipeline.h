// The text-processing stages of tokenizer.json that run before BPE: the normalizer and the pre-tokenizer. Each is
// parsed once from JSON; components plumb does not implement are rejected with an error naming the field, so a
// tokenizer is either handled exactly as Hugging Face handles it or not loaded at all.
#pragma once

#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer {

// "normalizer": null, one of NFC/NFD/NFKC/NFKD, or a Sequence of them.
class Normalizer {
 public:
  static Normalizer from_json(const nlohmann::json& j);
  // The normalized form of valid UTF-8 text.
  std::string apply(std::string_view text) const;
  bool is_identity() const { return forms_.empty(); }

 private:
  std::vector<NormalForm> forms_;
};

// What a Split does with the pieces its pattern matches (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// "pre_tokenizer": a Sequence of Split steps ending in ByteLevel, or a lone ByteLevel. The words it produces are
// byte strings; BPE then works on their bytes through the byte-level alphabet.
class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& j);

  // Appends the words of normalized `text` to `words`. Words point into `text` or, where ByteLevel's
  // add_prefix_space adds a space, into strings that `arena` owns.
  void split(std::string_view text, std::vector<std::string_view>& words, std::deque<std::string>& arena) const;

 private:
  struct SplitStep {
    std::optional<Regex> regex;  // set for {"Regex": ...}
    std::string literal;         // used for {"String": ...}
    SplitBehavior behavior;
    bool invert;
  };
  void apply_split(const SplitStep& step, std::string_view piece, std::vector<std::string_view>& out) const;

  std::vector<SplitStep> steps_;
  bool add_prefix_space_ = false;
  std::optional<Regex> byte_level_regex_;  // the GPT-2 pattern when ByteLevel.use_regex is true
};

}  // namespace plumb::tokenizer
