// The model's projections that read one input, stacked by rows into one matrix each, so that a backend can run them
// as one product (Backend::linear_parts): GDN's in_proj_qkv, z, b and a; attention's q, k and v; an MLP's gate and
// up; an MoE block's router, shared-expert gate and the shared expert's gate and up. Each weight then is a view of its
// rows of the stack, with its values, shape and dtype unchanged, so every other use of it is as before.
#pragma once

#include <vector>

#include "model/weights.h"
#include "ops/backend.h"

namespace plumb {

// Stacks each run of consecutive `parts` that share a dtype and a row length (a lone one stays as it is) into one
// new [Σ rows, K] tensor of `backend`, and makes each part a view of its rows of it.
void stack_rows(Backend& backend, const std::vector<Tensor*>& parts);

// stack_rows over every group of projections above in every layer, then returns the memory the parts held before to
// the device (Backend::release_cached_memory).
void stack_projections(ModelWeights& weights, Backend& backend);

}  // namespace plumb
