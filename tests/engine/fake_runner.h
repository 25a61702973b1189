// A Runner for tests: logits are a pure function of a sequence's whole token history, so any mix-up of slots,
// positions or chunks shows up in the tokens drawn. It records every call to check what the engine asked for. Made
// with `draws`, it draws tokens itself as a GPU runner does, with the CPU reference's Backend::sample_tokens. Made with
// `keeps`, it keeps every prefix offered to it, and a new sequence starts from the longest kept one of its prompt.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/hash.h"
#include "engine/runner.h"

namespace plumb::test {

class FakeRunner final : public Runner {
 public:
  // `step_time`: how long each forward call takes, so a test can catch requests while they run.
  FakeRunner(int64_t vocab, int64_t context, std::chrono::microseconds step_time = {}, bool draws = false,
             bool keeps = false)
      : vocab_(vocab), context_(context), step_time_us_(step_time.count()), draws_(draws), keeps_(keeps) {}
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_context() const override { return context_; }
  bool draws_tokens() const override { return draws_; }

  RunnerOutput forward(const std::vector<RunnerEntry>& batch) override {
    std::this_thread::sleep_for(std::chrono::microseconds(step_time_us_.load()));
    std::lock_guard lock(mutex_);
    RunnerOutput out;
    for (const RunnerEntry& e : batch) {
      std::vector<int32_t>& history = slots_[e.slot];
      if (e.start == 0) history.clear();
      PLUMB_CHECK(static_cast<int64_t>(history.size()) == e.start, "fake runner: slot {} holds {} tokens, not {}",
                  e.slot, history.size(), e.start);
      PLUMB_CHECK(!e.draw || draws_, "fake runner: asked to draw although it does not");
      history.insert(history.end(), e.tokens.begin(), e.tokens.end());
      calls_.push_back(e);
      const uint64_t h = fnv1a64(history.data(), history.size() * sizeof(int32_t));
      std::vector<float> row;  // [V]
      for (int64_t v = 0; v < vocab_; ++v) row.push_back(static_cast<float>((h >> (v % 48)) % 97) * 0.1f);
      out.drawn.push_back(e.draw ? draw(row, *e.draw, e.constraint) : -1);
      if (e.logits) out.logits.insert(out.logits.end(), row.begin(), row.end());
    }
    return out;
  }
  void release(int32_t slot) override {
    std::lock_guard lock(mutex_);
    slots_.erase(slot);
  }
  bool keeps_prefixes() const override { return keeps_; }
  int64_t start_from_cache(int32_t slot, std::span<const int32_t> prompt) override {
    std::lock_guard lock(mutex_);
    slots_.erase(slot);
    for (size_t n = prompt.size() - 1; n > 0; --n)
      if (kept_.count(std::vector<int32_t>(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n)))) {
        slots_[slot].assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n));
        return static_cast<int64_t>(n);
      }
    return 0;
  }
  void offer_prefix(int32_t slot, std::span<const int32_t> prompt, int64_t position) override {
    std::lock_guard lock(mutex_);
    if (!keeps_) return;
    const std::vector<int32_t>& history = slots_.at(slot);
    PLUMB_CHECK(
        static_cast<int64_t>(history.size()) == position && std::equal(history.begin(), history.end(), prompt.begin()),
        "fake runner: slot {} offered as {} tokens of its prompt, but it holds others", slot, position);
    kept_.insert(history);
  }
  std::set<std::vector<int32_t>> kept() {
    std::lock_guard lock(mutex_);
    return kept_;
  }

  // How long each later forward call takes.
  void set_step_time(std::chrono::microseconds step_time) { step_time_us_ = step_time.count(); }

  std::vector<RunnerEntry> calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  // As a GPU runner draws: a constraint's allowed tokens travel as bits, -1 where it allows none.
  int32_t draw(std::vector<float>& row, TokenDraw d, const TokenConstraint* constraint) {
    PLUMB_CHECK(!constraint || !d.allowed, "fake runner: a draw with allowed tokens of its own");
    std::vector<uint32_t> bits;  // [allowed_words(vocab)]
    if (constraint) {
      bits.resize(static_cast<size_t>(allowed_words(vocab_)));
      if (!constraint->allowed(bits.data(), vocab_)) return -1;
      d.allowed = bits.data();
    }
    int32_t id = -1;
    Tensor logits(DType::kF32, {1, vocab_}, Device::kCpu, row.data(), nullptr);
    Tensor ids(DType::kI32, {1}, Device::kCpu, &id, nullptr);
    backend_.sample_tokens(logits, {d}, ids);
    return id;
  }

  int64_t vocab_;
  int64_t context_;
  std::atomic<int64_t> step_time_us_;
  bool draws_;
  bool keeps_;
  std::set<std::vector<int32_t>> kept_;
  CpuBackend backend_;
  std::mutex mutex_;
  std::map<int32_t, std::vector<int32_t>> slots_;
  std::vector<RunnerEntry> calls_;
};

}  // namespace plumb::test
