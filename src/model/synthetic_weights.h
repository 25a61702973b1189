// Synthetic models for benchmarks: the real shapes of a named model with random weights generated on the device, so a
// speed measurement needs no checkpoint and no host copy of the weights (a 35B model is 70 GB).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/qwen3_next.h"
#include "ops/backend.h"

namespace plumb {

// A named synthetic configuration: the model's own dimensions, built through the same config.json parser (and its
// validation) that the loader uses.
struct SyntheticConfig {
  ModelConfig config;
  std::string description;  // what it is, in one line
  std::string reduction;    // how it departs from the real model ("" when it does not)
};

// "qwen3.5-35b-a3b", "qwen3-next-80b-a3b" (all 48 layers: FP8 weights only fit one H200),
// "qwen3-next-80b-a3b-reduced" (32 layers, which fit in BF16) or "tiny" (a few small layers for CPU smoke tests).
SyntheticConfig synthetic_config(const std::string& name);
std::vector<std::string> synthetic_config_names();

// The seed plumb bench uses unless told otherwise; plumb serve and generate --synthetic use it, so they run the very
// model the bench timed.
inline constexpr uint64_t kSyntheticSeed = 1;

// How a synthetic model stores its projections. kFp8: as the published FP8 checkpoints do (fine-grained E4M3 with a
// multiplier per 128 x 128 block; here one per row and K-slice): the attention and GDN projections but in_proj_b and
// in_proj_a, the shared expert and every routed expert; the embedding, lm_head, router and shared-expert gate stay
// BF16. kNvfp4: the same projections as NVIDIA's NVFP4 checkpoints store them (packed E2M1 codes, an E4M3 scale per
// row and 16 k, and a weight scale, here one per row).
enum class SyntheticWeights { kBF16, kFp8, kNvfp4 };
// "bf16", "fp8" or "nvfp4"; parse_synthetic_weights refuses anything else, naming it.
SyntheticWeights parse_synthetic_weights(const std::string& name);
const char* synthetic_weights_name(SyntheticWeights weights);

// The model of `config` with random weights, the one construction bench, serve and generate share: every weight
// allocated with backend.empty() and filled on the device with backend.random_uniform, BF16 projections uniform in
// ±1/sqrt(fan_in) (FP8 ones: codes uniform in ±448 times multipliers uniform in [1/2, 1] · 1/(448 sqrt(fan_in));
// NVFP4 ones: the bytes of such FP8 codes as E2M1 pairs, group scales uniform in [1, 2] and weight scales uniform in
// [1/2, 1] · 1/(12 sqrt(fan_in))),
// F32 norms, conv kernels, A_log and dt_bias. Each tensor draws from its own seed derived from `seed`, so the same
// seed gives the same model on every backend. With `mtp`, a random multi-token-prediction head as well (drawn after
// the rest, which stays the same): its drafts are as good as chance, so speculative decoding's cost shows whole.
Qwen3NextModel synthetic_model(const ModelConfig& config, Backend& backend, uint64_t seed,
                               SyntheticWeights weights = SyntheticWeights::kBF16, bool mtp = false);

}  // namespace plumb
