// The timings `plumb generate` and `plumb chat` print on stderr after each generation, as llama.cpp's tools do: the
// prompt's tokens and rate up to the first generated token, and the rate of the decode steps after it. (The model's
// load time is printed once it is loaded: cli/load_progress.h.)
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/generate.h"

namespace plumb::cli {

class GenerationTimer {
 public:
  using Clock = std::chrono::steady_clock;
  GenerationTimer() : start_(Clock::now()), finished_(start_) {}  // made as the prompt starts to run
  void token() {                                                  // a token was generated
    if (!first_token_) first_token_ = Clock::now();
  }
  void finished() { finished_ = Clock::now(); }
  // The report's lines, each "plumb: ...\n". `stopped`: generation ended by drawing a stop token, which took a
  // decode step of its own (or the prompt's pass, when it came first).
  std::string report(int64_t prompt_tokens, int64_t generated, bool stopped) const;

  // "plumb: speculative decoding: ...\n": drafts made and kept, and tokens made per verifying step; "" when none ran.
  static std::string speculation_report(const SpeculationStats& stats);

 private:
  Clock::time_point start_, finished_;
  std::optional<Clock::time_point> first_token_;
};

}  // namespace plumb::cli
