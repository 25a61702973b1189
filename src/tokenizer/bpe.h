// The byte-level BPE model of tokenizer.json: the vocabulary, the ranked merges, and the merge loop that turns one
// pre-tokenized word (a byte string) into token ids. The merge order is tokenizers' exactly: repeatedly apply the
// lowest-ranked adjacent pair, leftmost first, re-checking a queued pair against the current symbols before use.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace plumb::tokenizer {

// Token ids index dense tables (id -> text, id -> bytes), so a file may leave only this many ids unnamed below its
// largest; real tokenizers leave none, and a stray id near 2^30 would otherwise ask for gigabytes.
inline constexpr int64_t kMaxUnusedTokenIds = int64_t{1} << 16;

class BpeModel {
 public:
  // Parses tokenizer.json's "model" object (type BPE). Merges may be written "a b" or ["a", "b"].
  static BpeModel from_json(const nlohmann::json& model);

  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&&) = delete;
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one word, given as raw bytes. Bytes whose single-character token is missing from the vocab are
  // dropped, as tokenizers does when there is no unk_token. Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

  // id -> token text (byte-level characters) for the model's own vocabulary; empty where an id has no token.
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  BpeModel() = default;
  void merge(std::string_view word, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;  // token text -> id
  std::vector<std::string> tokens_;                 // id -> token text
  std::vector<int32_t> byte_ids_;                   // byte -> id of its one-character token, or -1
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> word_ids_;  // raw bytes of a token -> id (for ignore_merges)

  // (left id, right id) -> (rank, merged id), in an open-addressing table: this lookup is the inner loop.
  struct MergeSlot {
    uint64_t key;
    uint32_t rank;
    int32_t merged;
  };
  std::vector<MergeSlot> merges_;
  uint64_t merge_mask_ = 0;
  const MergeSlot* find_merge(int32_t left, int32_t right) const;

  // Words seen before, with their ids. Bounded; cleared when full.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace plumb::tokenizer
