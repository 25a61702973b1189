// Grammar-constrained decoding over a real vocabulary. A matcher's state is a set of parse stacks over a Grammar
// (several at once where the grammar is ambiguous so far); a token is allowed when its bytes, fed one by one, leave
// at least one stack alive. The allowed-token mask of a state is found by walking a byte trie of the vocabulary
// against the stacks (a subtree is skipped as soon as its prefix kills every stack; the walk's transitions between
// states are memoized, as most bytes inside a string lead back to the state they left), and cached by the state in
// the CompiledGrammar, so the states a generation revisits (inside a string, between fields) cost one lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace plumb::grammar {

// Bits over token ids, 64 to a word.
using TokenMask = std::vector<uint64_t>;
inline bool mask_has(const TokenMask& mask, int32_t id) {
  return (mask[static_cast<size_t>(id) >> 6] >> (static_cast<unsigned>(id) & 63u)) & 1u;
}

// Sets logits[id] to -inf for every id < vocab not in `mask` (ids past the mask's end included); false when no id
// below vocab is allowed. Whole words of the mask at a time, so a 151K-token row costs tens of microseconds.
bool apply_mask(const TokenMask& mask, float* logits, int64_t vocab);

// The parse stacks of a state, flat: stack i is positions[begin(i), ends[i]), bottom first; its top is a kBytes
// position, and below it are the positions to return to. An empty stack means the grammar is complete.
struct StackSet {
  std::vector<int32_t> positions;
  std::vector<int32_t> ends;
  size_t size() const { return ends.size(); }
  size_t begin(size_t i) const { return i == 0 ? 0 : static_cast<size_t>(ends[i - 1]); }
  void clear() {
    positions.clear();
    ends.clear();
  }
  // Appends a stack unless an equal one is already there.
  void add(const int32_t* stack, size_t length);
  bool has_empty() const;
  std::string key() const;  // the bytes of both arrays, for the mask cache
};

// The tokens a grammar is matched against: each id's bytes, in a byte trie.
class Vocabulary {
 public:
  // token_bytes[id]: the bytes token `id` stands for; an empty string marks a token never allowed (special tokens,
  // ids without a token). `stop_ids` are allowed exactly when the grammar is complete.
  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids);
  int64_t size() const { return static_cast<int64_t>(token_bytes_.size()); }
  std::string_view token(int32_t id) const { return token_bytes_[static_cast<size_t>(id)]; }
  bool is_stop(int32_t id) const;
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

  // The trie: node 0 is the root; node n's children are child_node[child_begin[n]..child_begin[n + 1]), reached by
  // the bytes at the same indices; the tokens whose bytes end at node n are ending[ending_begin[n]..[n + 1]).
  std::vector<int32_t> child_begin, child_node, ending_begin, ending;
  std::vector<uint8_t> child_byte;
  size_t depth = 0;  // the longest token, in bytes

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> stop_ids_;
};

// A grammar bound to a vocabulary, with its cache of masks by state. Safe to share between threads.
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary);
  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  StackSet initial() const;
  // The stacks of `in` after one more byte (empty: the byte is not allowed anywhere).
  void advance(const StackSet& in, uint8_t byte, StackSet& out) const;
  // The tokens allowed in state `stacks` (stop ids when it is complete), from the cache or computed and cached.
  std::shared_ptr<const TokenMask> mask(const StackSet& stacks) const;
  // The same mask computed without the cache (and without storing it).
  TokenMask compute_mask(const StackSet& stacks) const;

 private:
  void expand(int32_t position, std::vector<int32_t>& below, StackSet& out) const;
  struct Walk;
  void walk(int32_t node, int32_t state, Walk& w, TokenMask& mask) const;

  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
  mutable size_t cached_bytes_ = 0;
};

// One generation's position in a grammar.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);
  // The tokens allowed next.
  std::shared_ptr<const TokenMask> allowed() const { return grammar_->mask(stacks_); }
  // Takes token `id` if it is allowed (a stop id: only when complete, and the state stays); false otherwise, and
  // the state is unchanged.
  bool accept(int32_t id);
  // Feeds bytes one at a time; false (state unchanged) if some byte is not allowed.
  bool accept_bytes(std::string_view bytes);
  // The grammar has matched a whole value (a stop token may come).
  bool complete() const { return stacks_.has_empty(); }
  // Complete, and no byte can follow.
  bool finished() const { return stacks_.size() == 1 && complete(); }
  const StackSet& stacks() const { return stacks_; }
  const CompiledGrammar& compiled() const { return *grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  StackSet stacks_;
};

}  // namespace plumb::grammar
