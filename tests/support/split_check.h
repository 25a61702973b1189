// The chunk rule's promise, checked end to end: a prompt's logits and every layer's state are bit-identical whether
// it runs in one forward call, cut into calls at multiples of kGdnChunkSize, or among other sequences in one call.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/qwen3_next.h"

namespace plumb::test {

// A forward's logits of one row, then every layer's state: (name, hash) pairs.
using Hashes = std::vector<std::pair<std::string, uint64_t>>;

// Row `row` of a forward's logits [rows, V] and `state` after it.
Hashes hashes_of(const Qwen3NextModel& model, const Tensor& last_logits, int64_t row, const SequenceState& state);
// "" when equal, else the name of the first hash that differs.
std::string first_difference(const Hashes& want, const Hashes& got);

struct SplitCheck {
  int64_t first_length = 1;  // every prompt length first_length..last_length
  int64_t last_length = 300;
  std::vector<int64_t> chunks;  // tokens per call of the split runs (multiples of kGdnChunkSize)
  int64_t companions = 3;       // other sequences, of other lengths, sharing the prompt's one call
  uint64_t seed = 12;           // the prompts' and companions' ids
};

// Runs every length of `check` on `model`'s backend and returns one line per disagreement (empty: all identical),
// naming the length, the run and the first hash that differs.
std::vector<std::string> split_mismatches(const Qwen3NextModel& model, const SplitCheck& check);

}  // namespace plumb::test
