// A context-free grammar over bytes, the form every constraint (a JSON Schema, JSON mode, a tool call) is compiled
// into before a Matcher walks it against the vocabulary. A rule is a list of alternatives; an alternative is a
// sequence of byte sets and references to rules. Stored flat: each alternative is a run of elements in one array
// ending with a kEnd element, so a parse position is one int (an index into that array).
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plumb::grammar {

using ByteSet = std::bitset<256>;

// The bytes lo..hi (inclusive).
ByteSet byte_range(uint8_t lo, uint8_t hi);
ByteSet one_byte(uint8_t b);

struct Element {
  enum class Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = Kind::kEnd;
  int32_t rule = -1;  // kRule: the rule referenced
  ByteSet bytes;      // kBytes: the bytes that may come here
};

// One item of an alternative being built: a byte set, or a reference to a rule when `rule` >= 0.
struct Item {
  ByteSet bytes;
  int32_t rule = -1;
};
using Sequence = std::vector<Item>;

Item bytes_item(ByteSet bytes);
Item rule_item(int32_t rule);
// Appends one single-byte item per byte of `literal`.
void append_literal(Sequence& sequence, std::string_view literal);

class Grammar {
 public:
  const std::vector<Element>& elements() const { return elements_; }
  // The positions where rule `rule`'s alternatives start.
  const std::vector<int32_t>& alternatives(int32_t rule) const { return alternatives_[static_cast<size_t>(rule)]; }
  int32_t root() const { return root_; }
  size_t rule_count() const { return alternatives_.size(); }

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<std::vector<int32_t>> alternatives_;  // [rule] -> start positions
  int32_t root_ = -1;
};

class GrammarBuilder {
 public:
  // A new rule without alternatives yet; `name` appears in errors about it.
  int32_t add_rule(std::string name);
  void add_alternative(int32_t rule, Sequence sequence);
  // A new rule with the given alternatives.
  int32_t rule(std::string name, std::vector<Sequence> alternatives);
  // Throws plumb::Error if a rule has no alternative or the grammar is left-recursive (a rule that can reach itself
  // without consuming a byte would make the matcher's expansion loop forever).
  Grammar build(int32_t root) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
};

}  // namespace plumb::grammar
