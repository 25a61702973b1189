// Byte-level BPE (see bpe.h).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace plumb::tokenizer {
namespace {

constexpr std::string_view kFile = "tokenizer.json";
constexpr uint64_t kEmptyKey = ~uint64_t{0};  // ids are non-negative, so no real key has a 0xFFFFFFFF half
constexpr size_t kMaxCachedWordBytes = 64;    // longer words are rare and would crowd the cache
constexpr size_t kMaxCachedWords = size_t{1} << 17;

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}
uint64_t pair_hash(uint64_t key) {
  return key * 0x9E3779B97F4A7C15ull;
}

// Rejects the model options that change tokenization in ways plumb does not implement.
void check_supported_options(const nlohmann::json& model) {
  auto non_empty = [&](const char* key) {
    auto it = model.find(key);
    return it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty());
  };
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    PLUMB_CHECK(!non_empty(key), "{}: model.{} is set; plumb supports plain byte-level BPE only", kFile, key);
  }
  PLUMB_CHECK(!json_bool(model, "byte_fallback", false, kFile, "model"),
              "{}: model.byte_fallback is true; plumb supports byte-level BPE only", kFile);
}

}  // namespace

BpeModel::BpeModel(BpeModel&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      tokens_(std::move(other.tokens_)),
      byte_ids_(std::move(other.byte_ids_)),
      ignore_merges_(other.ignore_merges_),
      word_ids_(std::move(other.word_ids_)),
      merges_(std::move(other.merges_)),
      merge_mask_(other.merge_mask_),
      cache_(std::move(other.cache_)) {}

BpeModel BpeModel::from_json(const nlohmann::json& model) {
  PLUMB_CHECK(model.is_object(), "{}: model must be an object", kFile);
  if (model.contains("type")) {
    const std::string type = json_type(model, kFile, "model");
    PLUMB_CHECK(type == "BPE", "{}: model.type '{}' is not supported (plumb supports BPE)", kFile, type);
  }
  check_supported_options(model);
  BpeModel m;
  m.ignore_merges_ = json_bool(model, "ignore_merges", false, kFile, "model");

  const nlohmann::json& vocab = json_member(model, "vocab", kFile, "model");
  PLUMB_CHECK(vocab.is_object(), "{}: model.vocab must be an object mapping tokens to ids", kFile);
  int64_t max_id = -1;
  std::string max_token;
  for (const auto& [token, id] : vocab.items()) {
    PLUMB_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t{1} << 30),
                "{}: model.vocab['{}'] must be a non-negative integer id", kFile, token);
    m.vocab_.emplace(token, id.get<int32_t>());
    if (id.get<int64_t>() > max_id) {
      max_id = id.get<int64_t>();
      max_token = token;
    }
  }
  PLUMB_CHECK(max_id < static_cast<int64_t>(vocab.size()) + kMaxUnusedTokenIds,
              "{}: model.vocab['{}'] has id {} but model.vocab names only {} tokens (at most {} ids may go unused)",
              kFile, max_token, max_id, vocab.size(), kMaxUnusedTokenIds);
  m.tokens_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : m.vocab_) {
    PLUMB_CHECK(m.tokens_[id].empty(), "{}: model.vocab gives id {} to two tokens", kFile, id);
    m.tokens_[id] = token;
    m.word_ids_.emplace(byte_level_decode_token(token), id);
  }
  m.byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, byte_to_char(static_cast<uint8_t>(b)));
    auto it = m.vocab_.find(ch);
    if (it != m.vocab_.end()) m.byte_ids_[b] = it->second;
  }
  const bool has_unk = model.contains("unk_token") && !model["unk_token"].is_null();
  PLUMB_CHECK(!has_unk || std::find(m.byte_ids_.begin(), m.byte_ids_.end(), -1) == m.byte_ids_.end(),
              "{}: model.unk_token is set and some bytes have no token; plumb does not implement unknown tokens",
              kFile);

  const nlohmann::json& merges = json_member(model, "merges", kFile, "model");
  PLUMB_CHECK(merges.is_array(), "{}: model.merges must be a list", kFile);
  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity *= 2;
  m.merges_.assign(capacity, MergeSlot{kEmptyKey, 0, 0});
  m.merge_mask_ = capacity - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& merge = merges[rank];
    std::string left, right;
    if (merge.is_string()) {
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      PLUMB_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
                  "{}: model.merges[{}] '{}' must be two tokens separated by one space", kFile, rank, line);
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else {
      PLUMB_CHECK(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
                  "{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", kFile, rank);
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    int32_t ids[3];
    const std::string parts[3] = {left, right, left + right};
    for (int k = 0; k < 3; ++k) {
      auto it = m.vocab_.find(parts[k]);
      PLUMB_CHECK(it != m.vocab_.end(), "{}: model.merges[{}]: token '{}' is not in model.vocab", kFile, rank,
                  parts[k]);
      ids[k] = it->second;
    }
    // Later duplicates replace earlier ones, as in tokenizers' merge map.
    const uint64_t key = pair_key(ids[0], ids[1]);
    for (uint64_t slot = pair_hash(key) & m.merge_mask_;; slot = (slot + 1) & m.merge_mask_) {
      if (m.merges_[slot].key == kEmptyKey || m.merges_[slot].key == key) {
        m.merges_[slot] = MergeSlot{key, static_cast<uint32_t>(rank), ids[2]};
        break;
      }
    }
  }
  return m;
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t slot = pair_hash(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    const MergeSlot& s = merges_[slot];
    if (s.key == key) return &s;
    if (s.key == kEmptyKey) return nullptr;
  }
}

void BpeModel::merge(std::string_view word, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;  // -1 at either end
    bool alive;
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t merged;
    // std::priority_queue pops the largest, so "larger" means lower rank, then further left.
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap_storage;
  symbols.clear();
  for (unsigned char b : word) {
    const int32_t id = byte_ids_[b];
    if (id < 0) continue;  // no token for this byte and no unk_token: tokenizers drops it
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  }
  heap_storage.clear();
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(heap_storage));
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeSlot* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->merged});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // The queued pair may be stale: use it only if the current pair still merges into the same token.
    const MergeSlot* current = find_merge(left.id, right.id);
    if (current == nullptr || current->merged != top.merged) continue;
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeSlot* m = find_merge(symbols[left.prev].id, left.id)) {
        queue.push({m->rank, left.prev, m->merged});
      }
    }
    if (left.next >= 0) {
      if (const MergeSlot* m = find_merge(left.id, symbols[left.next].id)) {
        queue.push({m->rank, top.pos, m->merged});
      }
    }
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    auto it = word_ids_.find(std::string(word));
    if (it != word_ids_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    merge(word, ids);
    return;
  }
  const std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids.size();
  merge(word, ids);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kMaxCachedWords) cache_.clear();
  cache_.emplace(key, std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end()));
}

}  // namespace plumb::tokenizer
