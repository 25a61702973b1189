// Added and special tokens (tokenizer.json "added_tokens"). They are cut out of the text before normalization and BPE:
// tokens with normalized=false are found in the raw text, those with normalized=true in the normalized text. Matching
// is leftmost-longest; single_word, lstrip and rstrip work as in tokenizers' AddedVocabulary::find_matches.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace plumb::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// Parses tokenizer.json's "added_tokens" list (null or absent means none).
std::vector<AddedToken> parse_added_tokens(const nlohmann::json& list);

// A piece of text: either an added token (id >= 0) or plain text to tokenize further (id == -1).
struct TextSegment {
  size_t begin, end;
  int32_t id;
};

// Finds one group of added tokens (all normalized ones, or all others) in text.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text to look for (the content, normalized for normalized tokens) of `tokens[i]`.
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return tokens_.empty(); }

  // Splits text into segments that cover it, in order. Plain segments are never empty.
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  // Index and length of the longest pattern that starts at text[at]; index -1 if none does.
  std::pair<int, size_t> longest_at(std::string_view text, size_t at) const;

  std::vector<AddedToken> tokens_;
  // A byte trie over the patterns: node -> (byte -> child), and the pattern that ends at each node.
  std::vector<std::unordered_map<unsigned char, int32_t>> children_{1};
  std::vector<int32_t> terminal_{-1};
  bool first_byte_[256] = {};
};

}  // namespace plumb::tokenizer
