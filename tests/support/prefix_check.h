// The prefix cache's promise, checked end to end on any backend: a prompt that starts with a kept prefix resumes from
// its longest kept 64-token boundary, and its logits and every layer's state are bit-identical to the same prompt run
// from position 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/qwen3_next.h"

namespace plumb::test {

// Keeps one 300-token prompt's state at 64, 128, 192 and 256 tokens, then runs every prefix of it of length
// first..last (1 <= first <= last <= 300) twice: resumed from the cache and from 0. Returns one line per
// disagreement (empty: all identical), naming the length and what differs: the position it resumed from, the first
// hash, or the pages held afterwards.
std::vector<std::string> prefix_resume_mismatches(const Qwen3NextModel& model, int64_t first, int64_t last);

}  // namespace plumb::test
