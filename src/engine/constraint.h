// A rule about which tokens one request may draw next (structured output: a grammar), consulted by the engine before
// each draw of that request's row. The engine knows nothing of grammars; the server implements this over one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/backend.h"

namespace plumb {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits [vocab] of the tokens that may not come next to -inf. False when no token may come (the request
  // then ends with an error).
  virtual bool mask(float* logits, int64_t vocab) const = 0;
  // The same rule as bits, for a draw where the logits are (TokenDraw::allowed): sets bit t % 32 of bits[t / 32]
  // for each token t < vocab that may come next and clears the others; bits holds allowed_words(vocab) words. False
  // when no token may come. By default read off mask() over a row of zeros; a constraint that has bits at hand says
  // them directly.
  virtual bool allowed(uint32_t* bits, int64_t vocab) const {
    std::vector<float> row(static_cast<size_t>(vocab), 0.0f);
    const bool any = mask(row.data(), vocab);
    std::fill(bits, bits + allowed_words(vocab), 0u);
    for (int64_t t = 0; t < vocab; ++t)
      if (row[static_cast<size_t>(t)] == 0.0f) bits[t / 32] |= 1u << (t % 32);
    return any;
  }
  // The token drawn from the masked logits. False if it breaks the constraint after all (the logits gave every allowed
  // token -inf or NaN, so the draw fell outside them): the request then ends with an error.
  virtual bool accept(int32_t id) = 0;
  // No token may follow the ones accepted: the request ends (StopCause::kConstraintDone).
  virtual bool finished() const = 0;
};

}  // namespace plumb
