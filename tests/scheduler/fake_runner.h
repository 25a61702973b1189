// A Runner for tests: logits are a pure function of a sequence's whole token history, so any mix-up of slots,
// positions or chunks shows up in the tokens drawn. It records every call to check what the engine asked for.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "engine/runner.h"

namespace plumb::test {

class FakeRunner final : public Runner {
 public:
  // `step_time`: how long each forward call takes, so a test can catch requests while they run.
  FakeRunner(int64_t vocab, int64_t context, std::chrono::microseconds step_time = {})
      : vocab_(vocab), context_(context), step_time_(step_time) {}
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_context() const override { return context_; }

  std::vector<float> forward(const std::vector<RunnerEntry>& batch) override {
    std::this_thread::sleep_for(step_time_);
    std::lock_guard lock(mutex_);
    std::vector<float> logits;  // [entries, V]
    for (const RunnerEntry& e : batch) {
      std::vector<int32_t>& history = slots_[e.slot];
      if (e.start == 0) history.clear();
      PLUMB_CHECK(static_cast<int64_t>(history.size()) == e.start, "fake runner: slot {} holds {} tokens, not {}",
                  e.slot, history.size(), e.start);
      history.insert(history.end(), e.tokens.begin(), e.tokens.end());
      calls_.push_back(e);
      const uint64_t h = fnv1a64(history.data(), history.size() * sizeof(int32_t));
      for (int64_t v = 0; v < vocab_; ++v) logits.push_back(static_cast<float>((h >> (v % 48)) % 97) * 0.1f);
    }
    return logits;
  }
  void release(int32_t slot) override {
    std::lock_guard lock(mutex_);
    slots_.erase(slot);
  }

  std::vector<RunnerEntry> calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  int64_t vocab_;
  int64_t context_;
  std::chrono::microseconds step_time_;
  std::mutex mutex_;
  std::map<int32_t, std::vector<int32_t>> slots_;
  std::vector<RunnerEntry> calls_;
};

}  // namespace plumb::test
