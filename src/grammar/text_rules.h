// What the regex and GBNF compilers share: sets of Unicode code points written as grammar items (as UTF-8, or as the
// inside of a JSON string), and repetition.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace plumb::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// {n,m} counts above this are refused, and so is a grammar text whose rules would pass kMaxItems items.
constexpr int64_t kMaxRepeat = 4096;
constexpr size_t kMaxItems = size_t{1} << 16;

// Code points as ranges [first, second].
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
// Sorted, merged.
Ranges normalized(Ranges r);
Ranges complement(const Ranges& r);

// The code point at text[pos] (UTF-8, continuation bytes checked), pos moved past it; -1 (pos unchanged) if there
// is none there.
int64_t next_code_point(std::string_view text, size_t& pos);
// A hexadecimal digit's value, or -1.
int hex_value(char c);
// The UTF-8 bytes of code point `cp`.
std::string utf8(uint32_t cp);

enum class RegexText : uint8_t {
  kRaw,         // the characters as UTF-8 bytes
  kJsonString,  // the inside of a JSON string: '"', '\' and controls written as escapes, the rest as UTF-8
};

// Adds characters and repeats to a GrammarBuilder; `where` starts its errors.
class TextRules {
 public:
  TextRules(GrammarBuilder& builder, RegexText text, std::string_view where)
      : builder_(builder), text_(text), where_(where) {}
  // One character of `ranges` (surrogates left out). Throws plumb::Error if that leaves none.
  Item set(const Ranges& ranges);
  // `unit` repeated min..max times (max -1: any number); `nullable`: the unit can match nothing, which an unbounded
  // repeat refuses (it would loop without consuming).
  Sequence repeat(const Item& unit, bool nullable, int64_t min, int64_t max);
  // Appends `more` to `s`, counting items against kMaxItems.
  void append(Sequence& s, const Sequence& more);
  GrammarBuilder& builder() { return builder_; }

 private:
  GrammarBuilder& builder_;
  RegexText text_;
  std::string_view where_;
  size_t items_ = 0;
};

}  // namespace plumb::grammar
