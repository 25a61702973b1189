// The timings `plumb generate` prints on stderr when it is done, as llama.cpp's tools do: model load, the prompt's
// tokens and rate up to the first generated token, and the rate of the decode steps after it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace plumb::cli {

class GenerationTimer {
 public:
  using Clock = std::chrono::steady_clock;
  GenerationTimer() : start_(Clock::now()), loaded_(start_), finished_(start_) {}
  void loaded() { loaded_ = Clock::now(); }  // the model is loaded; the prompt runs next
  void token() {                             // a token was generated
    if (!first_token_) first_token_ = Clock::now();
  }
  void finished() { finished_ = Clock::now(); }
  // The report's lines, each "plumb: ...\n". `stopped`: generation ended by drawing a stop token, which took a
  // decode step of its own (or the prompt's pass, when it came first).
  std::string report(int64_t prompt_tokens, int64_t generated, bool stopped) const;

 private:
  Clock::time_point start_, loaded_, finished_;
  std::optional<Clock::time_point> first_token_;
};

}  // namespace plumb::cli
