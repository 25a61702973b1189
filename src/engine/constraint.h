// A rule about which tokens one request may draw next (structured output: a grammar), consulted by the engine before
// each draw of that request's row. The engine knows nothing of grammars; the server implements this over one.
#pragma once

#include <cstdint>

namespace plumb {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits [vocab] of the tokens that may not come next to -inf. False when no token may come (the request
  // then ends with an error).
  virtual bool mask(float* logits, int64_t vocab) const = 0;
  // The token drawn from the masked logits. False if it breaks the constraint after all (the logits gave every allowed
  // token -inf or NaN, so the draw fell outside them): the request then ends with an error.
  virtual bool accept(int32_t id) = 0;
  // No token may follow the ones accepted: the request ends (StopCause::kConstraintDone).
  virtual bool finished() const = 0;
};

}  // namespace plumb
