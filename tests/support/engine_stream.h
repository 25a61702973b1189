// Reading one engine request's events to its end, for the engine tests (tests/engine, tests/model).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace plumb::test {

// What one request streamed: its tokens, each token's details (logprob, alternatives), how it ended and why.
struct StreamOutcome {
  std::vector<int32_t> tokens;
  std::vector<GeneratedToken> details;
  std::optional<StopCause> finish;
  std::string error;                     // with kError
  std::optional<int64_t> cached_tokens;  // what the first event that reports it says
  SpeculationStats speculation;          // what the last event says
};

// The request's events until its last one, or until `timeout` (finish then stays empty, which the test sees).
inline StreamOutcome drain(RequestStream& stream, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  StreamOutcome out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!out.finish && std::chrono::steady_clock::now() < deadline) {
    for (EngineEvent& e : stream.wait(std::chrono::milliseconds(100))) {
      if (e.cached_tokens && !out.cached_tokens) out.cached_tokens = e.cached_tokens;
      if (e.token) {
        out.tokens.push_back(e.token->id);
        out.details.push_back(*e.token);
      }
      if (e.finish) {
        out.finish = e.finish;
        out.error = e.error;
        out.speculation = e.speculation;
      }
    }
  }
  return out;
}

// Waits until the engine holds no request and no finished answer waiting to be re-run or re-running (Engine); false
// if `timeout` passed first.
inline bool wait_until_idle(Engine& engine, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const EngineStats s = engine.stats();
    if (s.answers_pending == 0 && s.running == 0 && s.waiting == 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace plumb::test
