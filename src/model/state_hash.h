// Hashes of what a sequence has computed: FNV-1a 64 (core/hash.h) over the raw bytes of every layer's final recurrent
// and conv state and of its KV cache's logical content. Equal hashes across runs, batches and prompt splits are the
// evidence of bit-exactness (../shared/docs/exactness.md); `plumb logits --hash` prints them, tests compare them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/qwen3_next.h"

namespace plumb {

// FNV-1a 64 of a tensor's bytes (downloaded first when it lives on a device).
uint64_t tensor_hash(Backend& backend, const Tensor& t);

// ("layer<i>.recurrent", "layer<i>.conv") for Gated DeltaNet layers, ("layer<i>.k", "layer<i>.v") for attention
// layers, in layer order. A KV hash covers positions [0, position) in order, whatever pages hold them: runs that page
// a sequence differently give the same hashes.
std::vector<std::pair<std::string, uint64_t>> state_hashes(const Qwen3NextModel& model, const SequenceState& state);

}  // namespace plumb
