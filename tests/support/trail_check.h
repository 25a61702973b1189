// The GDN ops' trails (Backend::causal_conv1d_silu, StateTrails), checked on any backend against the backend itself:
// a verification's states after each token must be the bits that token leaves when it runs alone, one token a call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace plumb::test {

// A batch of verifications (1 to 9 tokens, one crossing a 64-position window, one a lone token with no trail) in one
// call of each GDN op with trails, on `backend`: every trail state, final state and output row must equal, bit for
// bit, those of the same sequence run one token a call from its initial state. Head dims dk x dv; dv % 4 != 0 takes
// the GPU's scalar state path. Returns one line per disagreement (empty: all equal).
std::vector<std::string> trail_mismatches(Backend& backend, int64_t dk, int64_t dv, uint64_t seed);

}  // namespace plumb::test
