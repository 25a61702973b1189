// What the engine's step loop needs from a model: run many sequences' new tokens, each in its own state slot, and
// return the logits of each one's last token. ModelRunner (model_runner.h) serves it with Qwen3NextModel; tests
// serve it with a scripted fake. A batched GPU forward plugs in behind the same interface.
#pragma once

#include <cstdint>
#include <vector>

namespace plumb {

struct RunnerEntry {
  int32_t slot = 0;             // the sequence's state slot
  int64_t start = 0;            // position of tokens[0]; 0 starts a fresh sequence in the slot
  std::vector<int32_t> tokens;  // the new tokens, at positions start, start + 1, ...
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;  // most tokens (prompt + generated) one sequence may hold
  // Runs every entry and returns the logits of each entry's last token, [entries, vocab] row-major. On failure it
  // throws plumb::Error and leaves every slot of the batch empty, so nothing half-advanced can be continued: a later
  // entry for such a slot must start at 0.
  virtual std::vector<float> forward(const std::vector<RunnerEntry>& batch) = 0;
  // The sequence in `slot` is gone: its state memory may be freed.
  virtual void release(int32_t slot) = 0;
};

}  // namespace plumb
