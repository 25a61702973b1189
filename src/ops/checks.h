// Argument checks every backend makes the same way, so a bad call gets the same message on any device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"

namespace plumb {

// The first step of every backend's copy: a quantized weight's scales (block and group) travel with it, so both
// tensors must have them or neither, and they are copied too.
inline void copy_block_scales(Backend& backend, const Tensor& src, Tensor& dst) {
  PLUMB_CHECK((src.block_scales() == nullptr) == (dst.block_scales() == nullptr) &&
                  (src.group_scales() == nullptr) == (dst.group_scales() == nullptr),
              "copy: a quantized weight {} and {} must both have the same scales or neither", shape_str(src.shape()),
              shape_str(dst.shape()));
  if (src.block_scales() != nullptr) {
    Tensor dst_scales = *dst.block_scales();
    backend.copy(*src.block_scales(), dst_scales);
  }
  if (src.group_scales() != nullptr) {
    Tensor dst_scales = *dst.group_scales();
    backend.copy(*src.group_scales(), dst_scales);
  }
}

// The token ids of `ids` (I32 [tokens] in host memory) as a vector, for an op that reads them on the host.
inline std::vector<int32_t> host_token_ids(const Tensor& ids, const char* op) {
  PLUMB_CHECK(ids.dtype() == DType::kI32 && ids.rank() == 1, "{}: ids are {} {}, expected I32 [tokens]", op,
              dtype_name(ids.dtype()), shape_str(ids.shape()));
  const int32_t* first = ids.data_as<const int32_t>();
  return std::vector<int32_t>(first, first + ids.numel());
}

// Checks a tensor's shape, naming the op and the argument.
inline void expect_shape(const Tensor& t, const Shape& shape, const char* op, const char* arg) {
  PLUMB_CHECK(t.shape() == shape, "{}: {} has shape {}, expected {}", op, arg, shape_str(t.shape()), shape_str(shape));
}

// Checks that a batch covers rows [0, rows) of its token-major tensors sequence after sequence, each sequence at
// least one row, with one state per sequence. (Two sequences claiming one row would also race on the GPU.)
inline void expect_batch(const BatchRows& batch, int64_t rows, size_t states, const char* op) {
  PLUMB_CHECK(batch.size() == states, "{}: {} sequences but {} states", op, batch.size(), states);
  int64_t next = 0;
  for (const SequenceRows& s : batch) {
    PLUMB_CHECK(s.begin == next && s.count > 0 && s.past >= 0,
                "{}: sequence rows [{}, +{}) (past {}) do not continue the batch at row {}", op, s.begin, s.count,
                s.past, next);
    next += s.count;
  }
  PLUMB_CHECK(next == rows, "{}: the batch covers {} rows of {}", op, next, rows);
}

// Checks that no two sequences of one call share state memory (their tensors' bytes overlap): each state is read and
// rewritten by its own sequence, and on the GPU two CTAs would race on a shared one.
inline void expect_distinct_states(const std::vector<Tensor*>& states, const char* op) {
  std::vector<std::pair<const char*, size_t>> spans;  // (first byte, sequence)
  for (size_t i = 0; i < states.size(); ++i) {
    PLUMB_CHECK(states[i] != nullptr, "{}: sequence {} has no state", op, i);
    if (states[i]->nbytes() > 0) spans.push_back({static_cast<const char*>(states[i]->data()), i});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t j = 1; j < spans.size(); ++j) {
    const size_t a = spans[j - 1].second, b = spans[j].second;
    PLUMB_CHECK(spans[j - 1].first + states[a]->nbytes() <= spans[j].first,
                "{}: sequences {} and {} of one call share a state", op, std::min(a, b), std::max(a, b));
  }
}

// Checks a GDN op's trails (Backend::causal_conv1d_silu): none, or one list a sequence, shorter than its tokens, of
// tensors shaped as its state, no two of the call's states and trail tensors overlapping (each is written by one
// sequence alone).
inline void expect_trails(const StateTrails& trails, const std::vector<Tensor*>& states, const BatchRows& batch,
                          const char* op) {
  if (trails.empty()) return;
  PLUMB_CHECK(trails.size() == batch.size(), "{}: {} trails for {} sequences", op, trails.size(), batch.size());
  struct Span {
    const char* first;
    size_t bytes;
    size_t sequence;
    int64_t token;  // -1: the sequence's state
  };
  std::vector<Span> spans;
  for (size_t i = 0; i < batch.size(); ++i) {
    PLUMB_CHECK(static_cast<int64_t>(trails[i].size()) < batch[i].count,
                "{}: sequence {} asks for {} trail states after {} tokens (at most one fewer than its tokens)", op, i,
                trails[i].size(), batch[i].count);
    PLUMB_CHECK(states[i] != nullptr, "{}: sequence {} has no state", op, i);
    spans.push_back({static_cast<const char*>(states[i]->data()), states[i]->nbytes(), i, -1});
    for (size_t t = 0; t < trails[i].size(); ++t) {
      const Tensor* trail = trails[i][t];
      PLUMB_CHECK(trail != nullptr && trail->shape() == states[i]->shape() && trail->dtype() == states[i]->dtype() &&
                      trail->device() == states[i]->device(),
                  "{}: sequence {}'s trail state {} is not shaped as its state {}", op, i, t,
                  trail ? shape_str(trail->shape()) : "(none)", shape_str(states[i]->shape()));
      spans.push_back({static_cast<const char*>(trail->data()), trail->nbytes(), i, static_cast<int64_t>(t)});
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.first < b.first; });
  for (size_t j = 1; j < spans.size(); ++j) {
    const Span &a = spans[j - 1], &b = spans[j];
    PLUMB_CHECK(a.bytes == 0 || a.first + a.bytes <= b.first,
                "{}: two states of one call overlap (sequence {}'s {} and sequence {}'s {})", op, a.sequence,
                a.token < 0 ? std::string("state") : "trail state " + std::to_string(a.token), b.sequence,
                b.token < 0 ? std::string("state") : "trail state " + std::to_string(b.token));
  }
}

// Checks that no page a sequence of one call writes (the pages of its new positions) is among the pages another
// sequence of the call uses: its new keys and values would be written under the other's reads or writes. (Pages only
// read may be shared: a prefix cache hands one full page to many sequences.)
inline void expect_unshared_written_pages(const std::vector<KvCache*>& caches, const BatchRows& batch, const char* op) {
  struct Use {
    int32_t page;
    size_t sequence;
    bool writes;
    bool operator<(const Use& o) const { return page != o.page ? page < o.page : sequence < o.sequence; }
  };
  std::vector<Use> uses;
  for (size_t i = 0; i < caches.size() && i < batch.size(); ++i) {
    const int64_t end = batch[i].past + batch[i].count;
    const int64_t used = std::min<int64_t>((end + kKvPageSize - 1) / kKvPageSize, std::ssize(caches[i]->pages));
    for (int64_t j = 0; j < used; ++j) uses.push_back({caches[i]->pages[j], i, (j + 1) * kKvPageSize > batch[i].past});
  }
  std::sort(uses.begin(), uses.end());
  for (size_t first = 0; first < uses.size();) {
    size_t last = first, writer = uses.size();
    for (; last < uses.size() && uses[last].page == uses[first].page; ++last)
      if (uses[last].writes && writer == uses.size()) writer = last;
    for (size_t j = first; writer != uses.size() && j < last; ++j)
      PLUMB_CHECK(uses[j].sequence == uses[writer].sequence,
                  "{}: sequences {} and {} of one call share KV page {}, which sequence {} writes", op,
                  std::min(uses[j].sequence, uses[writer].sequence), std::max(uses[j].sequence, uses[writer].sequence),
                  uses[first].page, uses[writer].sequence);
    first = last;
  }
}

// Checks a sequence's cache for `positions` positions of nkv heads of d, naming the op and the sequence: pools of
// [pages, kKvPageSize, nkv, d] and a page table covering the positions with pages of the pool. Every backend's
// attention refuses the same caches; each checks its own device and dtype.
inline void check_kv_cache(const KvCache& cache, int64_t nkv, int64_t d, int64_t positions, size_t sequence,
                           const char* op) {
  PLUMB_CHECK(cache.k.rank() == 4 && cache.k.dim(1) == kKvPageSize && cache.k.dim(2) == nkv && cache.k.dim(3) == d,
              "{}: sequence {}'s k pool {} is not [pages, {}, {}, {}]", op, sequence, shape_str(cache.k.shape()),
              kKvPageSize, nkv, d);
  PLUMB_CHECK(cache.v.shape() == cache.k.shape() && cache.v.dtype() == cache.k.dtype(),
              "{}: sequence {}'s v pool {} does not match its k pool {}", op, sequence, shape_str(cache.v.shape()),
              shape_str(cache.k.shape()));
  const int64_t needed = (positions + kKvPageSize - 1) / kKvPageSize, pool_pages = cache.k.dim(0);
  PLUMB_CHECK(static_cast<int64_t>(cache.pages.size()) >= needed,
              "{}: sequence {}'s page table has {} pages, its {} positions need {}", op, sequence, cache.pages.size(),
              positions, needed);
  for (int64_t j = 0; j < needed; ++j)
    PLUMB_CHECK(cache.pages[j] >= 0 && cache.pages[j] < pool_pages,
                "{}: sequence {}'s page {} is page id {}, outside its pool of {} pages", op, sequence, j,
                cache.pages[j], pool_pages);
}

// Checks one row's draw parameters, naming the row: every backend's sample_tokens refuses the same inputs.
inline void check_token_draw(const TokenDraw& d, int64_t row, int64_t vocab) {
  PLUMB_CHECK(std::isfinite(d.temperature) && d.temperature >= 0.0f &&
                  (d.temperature == 0.0f || std::isfinite(1.0f / d.temperature)),
              "sample_tokens: row {} has temperature {}, expected 0 or a finite positive number", row, d.temperature);
  PLUMB_CHECK(d.top_k >= 0, "sample_tokens: row {} has top_k {}, expected >= 0", row, d.top_k);
  PLUMB_CHECK(d.top_p > 0.0f && d.top_p <= 1.0f, "sample_tokens: row {} has top_p {}, expected (0, 1]", row, d.top_p);
  if (d.allowed != nullptr) {
    bool any = false;
    for (int64_t w = 0; w < allowed_words(vocab) && !any; ++w) {
      const uint32_t tail = vocab % 32 == 0 || w + 1 < allowed_words(vocab) ? ~0u : (1u << (vocab % 32)) - 1u;
      any = (d.allowed[w] & tail) != 0;
    }
    PLUMB_CHECK(any, "sample_tokens: row {} allows none of the {} tokens", row, vocab);
  }
}

}  // namespace plumb
