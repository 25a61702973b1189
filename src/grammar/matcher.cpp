#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace plumb::grammar {

namespace {

// A grammar's masks are dropped all at once past this much memory (about 860 masks of a 151K-token vocabulary).
constexpr size_t kMaxCachedBytes = size_t{16} << 20;

}  // namespace

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

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids)
    : token_bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)) {
  for (int32_t id : stop_ids_) PLUMB_CHECK(id >= 0 && id < size(), "stop token {} is not in [0, {})", id, size());
  // Tokens sorted by bytes share a trie node exactly where they share a prefix, so the trie is built in one pass
  // over the sorted order: a token's new nodes start where it stops sharing the previous token's prefix.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id)
    if (!token_bytes_[static_cast<size_t>(id)].empty()) order.push_back(id);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return token_bytes_[size_t(a)] < token_bytes_[size_t(b)]; });
  // Per node while building: its parent-ordered children and ending tokens.
  std::vector<std::vector<std::pair<uint8_t, int32_t>>> children(1);
  std::vector<std::vector<int32_t>> endings(1);
  std::vector<int32_t> path{0};  // the nodes of the previous token's bytes, root first
  std::string_view previous;
  for (int32_t id : order) {
    const std::string_view t = token_bytes_[static_cast<size_t>(id)];
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
    depth = std::max(depth, t.size());
    previous = t;
  }
  child_begin.push_back(0);
  ending_begin.push_back(0);
  for (size_t n = 0; n < children.size(); ++n) {
    for (const auto& [byte, node] : children[n]) {
      child_byte.push_back(byte);
      child_node.push_back(node);
    }
    child_begin.push_back(static_cast<int32_t>(child_node.size()));
    ending.insert(ending.end(), endings[n].begin(), endings[n].end());
    ending_begin.push_back(static_cast<int32_t>(ending.size()));
  }
}

bool Vocabulary::is_stop(int32_t id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {}

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

// One mask computation's states, numbered, and the transitions found between them: (state << 8 | byte) -> the next
// state, or -1 where the byte kills every stack.
struct CompiledGrammar::Walk {
  std::unordered_map<std::string, int32_t> ids;
  std::vector<StackSet> states;
  std::unordered_map<uint64_t, int32_t> next;
  StackSet scratch;
};

void CompiledGrammar::walk(int32_t node, int32_t state, Walk& w, TokenMask& mask) const {
  const Vocabulary& v = *vocabulary_;
  const auto n = static_cast<size_t>(node);
  for (auto c = static_cast<size_t>(v.child_begin[n]); c < static_cast<size_t>(v.child_begin[n + 1]); ++c) {
    const uint64_t edge = static_cast<uint64_t>(state) << 8 | v.child_byte[c];
    auto it = w.next.find(edge);
    if (it == w.next.end()) {
      advance(w.states[static_cast<size_t>(state)], v.child_byte[c], w.scratch);
      int32_t to = -1;
      if (w.scratch.size() > 0) {
        const auto [known, added] = w.ids.emplace(w.scratch.key(), static_cast<int32_t>(w.states.size()));
        if (added) w.states.push_back(w.scratch);
        to = known->second;
      }
      it = w.next.emplace(edge, to).first;
    }
    const int32_t to = it->second;
    if (to < 0) continue;
    const auto child = static_cast<size_t>(v.child_node[c]);
    for (auto t = static_cast<size_t>(v.ending_begin[child]); t < static_cast<size_t>(v.ending_begin[child + 1]); ++t)
      mask[static_cast<size_t>(v.ending[t]) >> 6] |= uint64_t{1} << (static_cast<unsigned>(v.ending[t]) & 63u);
    walk(static_cast<int32_t>(child), to, w, mask);
  }
}

TokenMask CompiledGrammar::compute_mask(const StackSet& stacks) const {
  TokenMask mask(static_cast<size_t>((vocabulary_->size() + 63) / 64), 0);
  if (stacks.has_empty())
    for (int32_t id : vocabulary_->stop_ids()) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  Walk w;
  w.states.push_back(stacks);
  w.ids.emplace(stacks.key(), 0);
  walk(0, 0, w, mask);
  return mask;
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(const StackSet& stacks) const {
  const std::string key = stacks.key();
  {
    std::lock_guard lock(mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  auto mask = std::make_shared<const TokenMask>(compute_mask(stacks));
  std::lock_guard lock(mutex_);
  const size_t bytes = mask->size() * sizeof(uint64_t) + key.size();
  if (cached_bytes_ + bytes > kMaxCachedBytes) {
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
