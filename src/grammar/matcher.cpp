#include "grammar/matcher.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace plumb::grammar {

namespace {

// A grammar precomputes at most this many contexts and this much of them; past either, a context is computed when a
// state first shows it (kept while the late ones stay under the same size).
constexpr size_t kMaxPrecomputedContexts = 4096;
constexpr size_t kMaxContextBytes = size_t{64} << 20;

}  // namespace

bool mask_bits(const TokenMask& mask, uint32_t* bits, int64_t vocab) {
  bool any = false;
  const int64_t words = (vocab + 31) / 32;
  for (int64_t w = 0; w < words; ++w) {
    const auto m = static_cast<size_t>(w / 2);
    auto word = static_cast<uint32_t>(m < mask.size() ? mask[m] >> (32 * (w % 2)) : 0);
    if (w + 1 == words && vocab % 32 != 0) word &= (1u << (vocab % 32)) - 1u;
    bits[w] = word;
    any = any || word != 0;
  }
  return any;
}

bool apply_mask(const TokenMask& mask, float* logits, int64_t vocab) {
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (int64_t base = 0; base < vocab; base += 64) {
    const auto w = static_cast<size_t>(base / 64);
    const uint64_t word = w < mask.size() ? mask[w] : 0;
    const int64_t n = std::min<int64_t>(64, vocab - base);
    if (word == 0) {
      std::fill(logits + base, logits + base + n, kNever);
      continue;
    }
    if (word == ~uint64_t{0}) {
      any = true;
      continue;
    }
    for (int64_t b = 0; b < n; ++b) {
      if ((word >> b) & 1u) {
        any = true;
      } else {
        logits[base + b] = kNever;
      }
    }
  }
  return any;
}

void StackSet::add(const int32_t* stack, size_t length) {
  for (size_t i = 0; i < size(); ++i) {
    const size_t b = begin(i);
    if (static_cast<size_t>(ends[i]) - b == length &&
        std::equal(stack, stack + length, positions.begin() + static_cast<std::ptrdiff_t>(b)))
      return;
  }
  positions.insert(positions.end(), stack, stack + length);
  ends.push_back(static_cast<int32_t>(positions.size()));
}

bool StackSet::has_empty() const {
  for (size_t i = 0; i < size(); ++i)
    if (static_cast<size_t>(ends[i]) == begin(i)) return true;
  return false;
}

std::string StackSet::key() const {
  std::string k(sizeof(int32_t) * (1 + ends.size() + positions.size()), '\0');
  const auto n = static_cast<int32_t>(ends.size());
  char* p = k.data();
  std::memcpy(p, &n, sizeof n);
  // memcpy needs valid pointers even for no bytes, and an empty vector's data() may be null.
  if (!ends.empty()) std::memcpy(p + sizeof n, ends.data(), ends.size() * sizeof(int32_t));
  if (!positions.empty())
    std::memcpy(p + sizeof n + ends.size() * sizeof(int32_t), positions.data(), positions.size() * sizeof(int32_t));
  return k;
}

ByteTrie ByteTrie::build(std::vector<std::pair<std::string_view, int32_t>> entries) {
  std::erase_if(entries, [](const auto& e) { return e.first.empty(); });
  // Strings sorted share a trie node exactly where they share a prefix, so the trie is built in one pass over the
  // sorted order: a string's new nodes start where it stops sharing the previous string's prefix.
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // Per node while building: its children in byte order and its ending ids.
  std::vector<std::vector<std::pair<uint8_t, int32_t>>> children(1);
  std::vector<std::vector<int32_t>> endings(1);
  std::vector<int32_t> path{0};  // the nodes of the previous string's bytes, root first
  std::string_view previous;
  ByteTrie trie;
  for (const auto& [t, id] : entries) {
    size_t shared = 0;
    while (shared < t.size() && shared < previous.size() && t[shared] == previous[shared]) ++shared;
    path.resize(shared + 1);
    for (size_t i = shared; i < t.size(); ++i) {
      const auto node = static_cast<int32_t>(children.size());
      children.emplace_back();
      endings.emplace_back();
      children[static_cast<size_t>(path.back())].push_back({static_cast<uint8_t>(t[i]), node});
      path.push_back(node);
    }
    endings[static_cast<size_t>(path.back())].push_back(id);
    trie.depth = std::max(trie.depth, t.size());
    previous = t;
  }
  trie.child_begin.push_back(0);
  trie.ending_begin.push_back(0);
  for (size_t n = 0; n < children.size(); ++n) {
    for (const auto& [byte, node] : children[n]) {
      trie.child_byte.push_back(byte);
      trie.child_node.push_back(node);
    }
    trie.child_begin.push_back(static_cast<int32_t>(trie.child_node.size()));
    trie.ending.insert(trie.ending.end(), endings[n].begin(), endings[n].end());
    trie.ending_begin.push_back(static_cast<int32_t>(trie.ending.size()));
  }
  return trie;
}

size_t ByteTrie::bytes() const {
  return sizeof(int32_t) * (child_begin.size() + child_node.size() + ending_begin.size() + ending.size()) +
         child_byte.size();
}

size_t Context::bytes() const {
  return sizeof(int32_t) * accepted_ids.size() + sizeof(uint64_t) * accepted_mask.size() + crossing.bytes();
}

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids)
    : token_bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)) {
  for (int32_t id : stop_ids_) PLUMB_CHECK(id >= 0 && id < size(), "stop token {} is not in [0, {})", id, size());
  std::vector<std::pair<std::string_view, int32_t>> entries;
  for (int32_t id = 0; id < size(); ++id) entries.emplace_back(token_bytes_[static_cast<size_t>(id)], id);
  trie_ = ByteTrie::build(std::move(entries));
}

bool Vocabulary::is_stop(int32_t id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {
  precompute_contexts();
}

void CompiledGrammar::expand(int32_t position, std::vector<int32_t>& below, StackSet& out) const {
  const Element& e = grammar_.elements()[static_cast<size_t>(position)];
  switch (e.kind) {
    case Element::Kind::kBytes:
      below.push_back(position);
      out.add(below.data(), below.size());
      below.pop_back();
      return;
    case Element::Kind::kRule: {
      // A reference that ends its alternative returns straight to the caller's caller, so a right-recursive loop
      // (a string's characters, an array's items) keeps a stack of constant depth.
      const bool last = grammar_.elements()[static_cast<size_t>(position) + 1].kind == Element::Kind::kEnd;
      if (!last) below.push_back(position + 1);
      for (int32_t start : grammar_.alternatives(e.rule)) expand(start, below, out);
      if (!last) below.pop_back();
      return;
    }
    case Element::Kind::kEnd: {
      if (below.empty()) {
        out.add(nullptr, 0);
        return;
      }
      const int32_t back = below.back();
      below.pop_back();
      expand(back, below, out);
      below.push_back(back);
      return;
    }
  }
}

StackSet CompiledGrammar::initial() const {
  StackSet out;
  std::vector<int32_t> below;
  for (int32_t start : grammar_.alternatives(grammar_.root())) expand(start, below, out);
  return out;
}

void CompiledGrammar::advance(const StackSet& in, uint8_t byte, StackSet& out) const {
  out.clear();
  thread_local std::vector<int32_t> below;  // reused: the trie walk advances once per node it visits
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t b = in.begin(i), e = static_cast<size_t>(in.ends[i]);
    if (b == e) continue;
    const int32_t top = in.positions[e - 1];
    if (!grammar_.elements()[static_cast<size_t>(top)].bytes.test(byte)) continue;
    below.assign(in.positions.begin() + static_cast<std::ptrdiff_t>(b),
                 in.positions.begin() + static_cast<std::ptrdiff_t>(e - 1));
    expand(top + 1, below, out);
  }
}

// One trie walk's states, numbered, and the transitions found between them: (state << 8 | byte) -> the next state,
// or -1 where the byte kills every stack. With `crossings` set, it gets the nodes (and their depths) where a state
// holds an empty stack, below which tokens go on past the walk's start context.
struct CompiledGrammar::Walk {
  std::unordered_map<std::string, int32_t> ids;
  std::vector<StackSet> states;
  std::vector<ByteSet> next_bytes;  // [state]: the bytes some stack of it takes
  std::vector<uint8_t> ended;       // [state]: it holds an empty stack
  std::unordered_map<uint64_t, int32_t> next;
  StackSet scratch;
  std::vector<std::pair<int32_t, size_t>>* crossings = nullptr;

  int32_t add(const StackSet& s, const Grammar& g) {
    const auto [known, added] = ids.emplace(s.key(), static_cast<int32_t>(states.size()));
    if (!added) return known->second;
    states.push_back(s);
    ByteSet bytes;
    for (size_t i = 0; i < s.size(); ++i)
      if (static_cast<size_t>(s.ends[i]) != s.begin(i))
        bytes |= g.elements()[static_cast<size_t>(s.positions[static_cast<size_t>(s.ends[i]) - 1])].bytes;
    next_bytes.push_back(bytes);
    ended.push_back(s.has_empty());
    return known->second;
  }
};

void CompiledGrammar::walk(const ByteTrie& trie, int32_t node, int32_t state, size_t depth, Walk& w,
                           TokenMask& mask) const {
  const auto n = static_cast<size_t>(node);
  for (auto c = static_cast<size_t>(trie.child_begin[n]); c < static_cast<size_t>(trie.child_begin[n + 1]); ++c) {
    const uint8_t byte = trie.child_byte[c];
    if (!w.next_bytes[static_cast<size_t>(state)].test(byte)) continue;
    const uint64_t edge = static_cast<uint64_t>(state) << 8 | byte;
    auto it = w.next.find(edge);
    if (it == w.next.end()) {
      advance(w.states[static_cast<size_t>(state)], byte, w.scratch);
      it = w.next.emplace(edge, w.scratch.size() > 0 ? w.add(w.scratch, grammar_) : -1).first;
    }
    const int32_t to = it->second;
    if (to < 0) continue;
    const auto child = static_cast<size_t>(trie.child_node[c]);
    for (auto t = static_cast<size_t>(trie.ending_begin[child]); t < static_cast<size_t>(trie.ending_begin[child + 1]);
         ++t)
      mask[static_cast<size_t>(trie.ending[t]) >> 6] |= uint64_t{1} << (static_cast<unsigned>(trie.ending[t]) & 63u);
    const bool leaf = trie.child_begin[child] == trie.child_begin[child + 1];
    if (w.crossings && w.ended[static_cast<size_t>(to)] && !leaf)
      w.crossings->push_back({static_cast<int32_t>(child), depth + 1});
    walk(trie, static_cast<int32_t>(child), to, depth + 1, w, mask);
  }
}

namespace {

void set_stops(const Vocabulary& v, TokenMask& mask) {
  for (int32_t id : v.stop_ids()) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
}

// The key of the context `top` (1 or 2 positions, the stack's top last).
uint64_t context_key(const int32_t* top, size_t length) {
  static_assert(kContextDepth == 2);
  const auto below = length == 2 ? static_cast<uint64_t>(static_cast<uint32_t>(top[0]) + 1) : 0;
  return below << 32 | static_cast<uint32_t>(top[length - 1]);
}

}  // namespace

TokenMask CompiledGrammar::reference_mask(const StackSet& stacks) const {
  TokenMask mask(static_cast<size_t>((vocabulary_->size() + 63) / 64), 0);
  if (stacks.has_empty()) set_stops(*vocabulary_, mask);
  Walk w;
  w.add(stacks, grammar_);
  walk(vocabulary_->trie(), 0, 0, 0, w, mask);
  return mask;
}

Context CompiledGrammar::compute_context(const int32_t* top, size_t length) const {
  const Vocabulary& v = *vocabulary_;
  const ByteTrie& trie = v.trie();
  StackSet start;
  start.add(top, length);
  TokenMask accepted(static_cast<size_t>((v.size() + 63) / 64), 0);
  std::vector<std::pair<int32_t, size_t>> crossings;
  Walk w;
  w.crossings = &crossings;
  w.add(start, grammar_);
  walk(trie, 0, 0, 0, w, accepted);
  // Below a node where the context has ended, every token's bytes past that node are up to what lies beneath.
  Context context;
  std::vector<std::pair<std::string_view, int32_t>> crossing;
  std::vector<int32_t> pending;
  for (const auto& [node, depth] : crossings) {
    pending.assign(trie.child_node.begin() + trie.child_begin[static_cast<size_t>(node)],
                   trie.child_node.begin() + trie.child_begin[static_cast<size_t>(node) + 1]);
    while (!pending.empty()) {
      const auto n = static_cast<size_t>(pending.back());
      pending.pop_back();
      for (auto t = static_cast<size_t>(trie.ending_begin[n]); t < static_cast<size_t>(trie.ending_begin[n + 1]); ++t)
        crossing.emplace_back(v.token(trie.ending[t]).substr(depth), trie.ending[t]);
      pending.insert(pending.end(), trie.child_node.begin() + trie.child_begin[n],
                     trie.child_node.begin() + trie.child_begin[n + 1]);
    }
  }
  context.crossing = ByteTrie::build(std::move(crossing));
  size_t count = 0;
  for (uint64_t word : accepted) count += static_cast<size_t>(std::popcount(word));
  // Setting an id's bit costs about what OR-ing four words of a mask does.
  if (count * 4 <= accepted.size()) {
    for (size_t i = 0; i < accepted.size(); ++i)
      for (uint64_t word = accepted[i]; word != 0; word &= word - 1)
        context.accepted_ids.push_back(static_cast<int32_t>(i * 64 + static_cast<size_t>(std::countr_zero(word))));
  } else {
    context.accepted_mask = std::move(accepted);
  }
  return context;
}

void CompiledGrammar::precompute_contexts() {
  const std::vector<Element>& elements = grammar_.elements();
  // frames[rule]: the byte positions a stack can have on top while the frame entered at `rule` is the topmost, that
  // is the rule's own and, through references that end an alternative (they push no return), those of the rules
  // they name.
  std::vector<std::vector<int32_t>> frames(grammar_.rule_count());
  std::vector<uint8_t> framed(grammar_.rule_count(), 0);
  auto frame = [&](int32_t rule) -> const std::vector<int32_t>& {
    std::vector<int32_t>& out = frames[static_cast<size_t>(rule)];
    if (framed[static_cast<size_t>(rule)]) return out;
    framed[static_cast<size_t>(rule)] = 1;
    std::vector<uint8_t> seen(grammar_.rule_count(), 0);
    std::vector<int32_t> pending{rule};
    seen[static_cast<size_t>(rule)] = 1;
    while (!pending.empty()) {
      const int32_t r = pending.back();
      pending.pop_back();
      for (int32_t p : grammar_.alternatives(r)) {
        for (; elements[static_cast<size_t>(p)].kind != Element::Kind::kEnd; ++p) {
          const Element& e = elements[static_cast<size_t>(p)];
          if (e.kind == Element::Kind::kBytes) {
            out.push_back(p);
          } else if (elements[static_cast<size_t>(p) + 1].kind == Element::Kind::kEnd &&
                     !seen[static_cast<size_t>(e.rule)]) {
            seen[static_cast<size_t>(e.rule)] = 1;
            pending.push_back(e.rule);
          }
        }
      }
    }
    return out;
  };
  // Every context a stack can show: a top in the root's frame with nothing below, or a top in the frame of a rule
  // referenced mid-alternative with the position after that reference below it.
  std::vector<std::array<int32_t, 2>> tops;
  for (int32_t p : frame(grammar_.root())) tops.push_back({-1, p});
  for (size_t q = 0; q + 1 < elements.size(); ++q) {
    if (elements[q].kind != Element::Kind::kRule || elements[q + 1].kind == Element::Kind::kEnd) continue;
    for (int32_t p : frame(elements[q].rule)) tops.push_back({static_cast<int32_t>(q + 1), p});
  }
  for (const auto& top : tops) {
    const int32_t* begin = top[0] < 0 ? top.data() + 1 : top.data();
    const size_t length = top[0] < 0 ? 1 : 2;
    const uint64_t key = context_key(begin, length);
    if (contexts_.count(key)) continue;
    if (contexts_.size() >= kMaxPrecomputedContexts || context_bytes_ >= kMaxContextBytes) return;
    Context c = compute_context(begin, length);
    context_bytes_ += c.bytes();
    contexts_.emplace(key, std::move(c));
  }
  all_contexts_ = true;
}

const Context& CompiledGrammar::context(const int32_t* top, size_t length, std::shared_ptr<const Context>& hold) const {
  const uint64_t key = context_key(top, length);
  if (const auto it = contexts_.find(key); it != contexts_.end()) return it->second;
  {
    std::lock_guard lock(mutex_);
    if (const auto it = late_contexts_.find(key); it != late_contexts_.end()) return *(hold = it->second);
  }
  hold = std::make_shared<const Context>(compute_context(top, length));
  std::lock_guard lock(mutex_);
  ++late_computed_;
  if (late_bytes_ + hold->bytes() > kMaxContextBytes) {
    late_contexts_.clear();
    late_bytes_ = 0;
  }
  if (late_contexts_.emplace(key, hold).second) late_bytes_ += hold->bytes();
  return *hold;
}

size_t CompiledGrammar::late_contexts() const {
  std::lock_guard lock(mutex_);
  return late_computed_;
}

TokenMask CompiledGrammar::context_mask(const StackSet& stacks) const {
  TokenMask mask(static_cast<size_t>((vocabulary_->size() + 63) / 64), 0);
  if (stacks.has_empty()) set_stops(*vocabulary_, mask);
  // One walk for every stack's crossing tokens, so the transitions one finds serve the others; stacks that differ
  // only in their top context (the alternatives of one character class) share their continuation below too.
  Walk w;
  StackSet after;
  std::vector<int32_t> below;
  int32_t after_state = -1;
  std::shared_ptr<const Context> hold;
  for (size_t i = 0; i < stacks.size(); ++i) {
    const size_t b = stacks.begin(i), e = static_cast<size_t>(stacks.ends[i]);
    if (b == e) continue;
    const size_t length = std::min(e - b, kContextDepth);
    const int32_t* top = stacks.positions.data() + e - length;
    const Context& c = context(top, length, hold);
    for (int32_t id : c.accepted_ids) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    for (size_t word = 0; word < c.accepted_mask.size(); ++word) mask[word] |= c.accepted_mask[word];
    // The crossing tokens, against what the stack does once the context has ended (nothing, where the context is
    // the whole stack).
    if (e - b == length || c.crossing.nodes() <= 1) continue;
    const auto from = stacks.positions.begin() + static_cast<std::ptrdiff_t>(b);
    const auto to = stacks.positions.begin() + static_cast<std::ptrdiff_t>(e - length);
    if (after_state < 0 || !std::equal(from, to, below.begin(), below.end())) {
      below.assign(from, to);
      const int32_t back = below.back();
      below.pop_back();
      after.clear();
      expand(back, below, after);
      below.push_back(back);
      after_state = w.add(after, grammar_);
    }
    walk(c.crossing, 0, after_state, 0, w, mask);
  }
  return mask;
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(const StackSet& stacks) const {
  const std::string key = stacks.key();
  {
    std::lock_guard lock(mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  auto mask = std::make_shared<const TokenMask>(context_mask(stacks));
  std::lock_guard lock(mutex_);
  const size_t bytes = mask->size() * sizeof(uint64_t) + key.size();
  if (cached_bytes_ + bytes > kMaxMaskCacheBytes) {
    cache_.clear();
    cached_bytes_ = 0;
  }
  if (cache_.emplace(key, mask).second) cached_bytes_ += bytes;
  return mask;
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stacks_(grammar_->initial()) {}

bool Matcher::accept(int32_t id) {
  const Vocabulary& v = grammar_->vocabulary();
  if (id < 0 || id >= v.size()) return false;
  if (v.is_stop(id)) return complete();
  const std::string_view bytes = v.token(id);
  return !bytes.empty() && accept_bytes(bytes);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  StackSet current = stacks_, next;
  for (char c : bytes) {
    grammar_->advance(current, static_cast<uint8_t>(c), next);
    if (next.size() == 0) return false;
    std::swap(current, next);
  }
  stacks_ = std::move(current);
  return true;
}

}  // namespace plumb::grammar
