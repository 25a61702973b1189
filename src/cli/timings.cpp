#include "cli/timings.h"

#include <fmt/format.h>

namespace plumb::cli {
namespace {

double ms_between(GenerationTimer::Clock::time_point a, GenerationTimer::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Tokens per second, or 0 for a span too short to time.
double rate(int64_t tokens, double ms) {
  return ms > 0.0 ? static_cast<double>(tokens) * 1000.0 / ms : 0.0;
}

}  // namespace

std::string GenerationTimer::report(int64_t prompt_tokens, int64_t generated, bool stopped) const {
  // The first token comes out of the prompt's forward pass; without one, the prompt's time runs to the end.
  const Clock::time_point first = first_token_.value_or(finished_);
  const double prompt_ms = ms_between(start_, first);
  std::string out = fmt::format("plumb: prompt {} tokens in {:.1f} ms, {:.2f} tokens/s", prompt_tokens, prompt_ms,
                                rate(prompt_tokens, prompt_ms));
  if (first_token_) out += fmt::format("; time to first token {:.1f} ms", prompt_ms);
  // Every later token, and a stop token drawn after them, took one decode step.
  const int64_t steps = generated > 0 ? generated - 1 + (stopped ? 1 : 0) : 0;
  const double decode_ms = ms_between(first, finished_);
  out += fmt::format("\nplumb: generated {} tokens; {} decode steps in {:.1f} ms, {:.2f} tokens/s\n", generated, steps,
                     decode_ms, rate(steps, decode_ms));
  return out;
}

std::string GenerationTimer::speculation_report(const SpeculationStats& s) {
  if (s.steps == 0) return "";
  return fmt::format("plumb: speculative decoding: {} of {} drafts kept ({:.1f} %), {:.2f} tokens a verifying step\n",
                     s.accepted, s.drafted, 100.0 * static_cast<double>(s.accepted) / static_cast<double>(s.drafted),
                     1.0 + static_cast<double>(s.accepted) / static_cast<double>(s.steps));
}

}  // namespace plumb::cli
