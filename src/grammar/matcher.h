// Grammar-constrained decoding over a real vocabulary. A matcher's state is a set of parse stacks over a Grammar
// (several at once where the grammar is ambiguous so far); a token is allowed when its bytes, fed one by one, leave
// at least one stack alive. Masks are found the XGrammar way: when a CompiledGrammar is built, every context (the top
// kContextDepth positions of a stack, whatever lies beneath) has the vocabulary's byte trie walked once, giving the
// tokens it accepts whatever the stack below holds, and the few that cross the context's end (a '"' that closes a
// string, then more bytes), kept as the bytes past the end. A state's mask is then the union, over its stacks, of each
// context's accepted tokens plus those of its crossing tokens whose remaining bytes the stack's real continuation
// takes; masks are cached by state, so the states a generation revisits cost one lookup. The plain walk of the whole
// trie against a state (reference_mask) stays as the reference the tests hold this to.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
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
// The same mask as 32-bit words for a draw on the device (TokenDraw::allowed): bit id % 32 of bits[id / 32] set for
// each id < vocab in `mask`, every other bit of the (vocab + 31) / 32 words clear; false when no id below vocab is in
// it.
bool mask_bits(const TokenMask& mask, uint32_t* bits, int64_t vocab);

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

// Strings standing for token ids, in a byte trie: node 0 is the root; node n's children are
// child_node[child_begin[n]..child_begin[n + 1]), reached by the bytes at the same indices; the ids whose strings end
// at node n are ending[ending_begin[n]..[n + 1]).
struct ByteTrie {
  std::vector<int32_t> child_begin, child_node, ending_begin, ending;
  std::vector<uint8_t> child_byte;
  size_t depth = 0;  // the longest string, in bytes

  // Entries (string, id) in any order; empty strings are left out.
  static ByteTrie build(std::vector<std::pair<std::string_view, int32_t>> entries);
  size_t nodes() const { return child_begin.empty() ? 0 : child_begin.size() - 1; }
  size_t bytes() const;
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

  const ByteTrie& trie() const { return trie_; }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> stop_ids_;
  ByteTrie trie_;
};

// A context is this many positions at the top of a stack. Two take a string's or an object's whole body in (the top
// is a character class, the one below the rule it returns to), so only tokens that leave the value cross its end.
constexpr size_t kContextDepth = 2;

// What the tokens do in one context, whatever lies below it.
struct Context {
  // The tokens accepted whatever lies below (those that end where the context does included): as ids where there are
  // few (a quarter of the mask's words at most), else as a mask.
  std::vector<int32_t> accepted_ids;
  TokenMask accepted_mask;
  // The tokens that cross the context's end, by the bytes they have left there (one entry per point they cross it).
  ByteTrie crossing;
  size_t bytes() const;
};

// The most memory a grammar's cache of masks by state grows to; past it the masks are dropped all at once (about
// 860 masks of a 151K-token vocabulary).
inline constexpr size_t kMaxMaskCacheBytes = size_t{16} << 20;

// A grammar bound to a vocabulary, with its cache of masks by state. Safe to share between threads.
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary);
  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  StackSet initial() const;
  // The stacks of `in` after one more byte (empty: the byte is not allowed anywhere).
  void advance(const StackSet& in, uint8_t byte, StackSet& out) const;
  // The tokens allowed in state `stacks` (stop ids when it is complete), from the cache or computed from the
  // contexts and cached.
  std::shared_ptr<const TokenMask> mask(const StackSet& stacks) const;
  // The same mask from the contexts, without the mask cache.
  TokenMask context_mask(const StackSet& stacks) const;
  // The same mask by walking the whole vocabulary trie against `stacks`: the reference.
  TokenMask reference_mask(const StackSet& stacks) const;

  // Contexts computed when the grammar was built (all a stack can show, unless the budget ran out first), and those
  // met later that were not, computed on first use.
  size_t precomputed_contexts() const { return contexts_.size(); }
  bool all_contexts_precomputed() const { return all_contexts_; }
  size_t late_contexts() const;
  size_t context_bytes() const { return context_bytes_; }

 private:
  void expand(int32_t position, std::vector<int32_t>& below, StackSet& out) const;
  struct Walk;
  void walk(const ByteTrie& trie, int32_t node, int32_t state, size_t depth, Walk& w, TokenMask& mask) const;
  void precompute_contexts();
  Context compute_context(const int32_t* top, size_t length) const;
  const Context& context(const int32_t* top, size_t length, std::shared_ptr<const Context>& hold) const;

  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::unordered_map<uint64_t, Context> contexts_;  // by context_key, filled by the constructor
  size_t context_bytes_ = 0;
  bool all_contexts_ = false;
  mutable std::mutex mutex_;
  mutable std::unordered_map<uint64_t, std::shared_ptr<const Context>> late_contexts_;
  mutable size_t late_bytes_ = 0, late_computed_ = 0;
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
