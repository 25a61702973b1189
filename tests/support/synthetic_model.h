// Writes a complete, valid model folder from a config alone: every tensor the weight table names, filled with
// seeded random values. Tests use it for models no reference exists for (bad-input cases start from one and break
// it in a single, named way).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/safetensors_writer.h"

namespace plumb::test {

// A small qwen3_next config.json (2 GDN + 1 attention layer, MoE with a shared expert).
nlohmann::json small_qwen3_next_config();

// small_qwen3_next_config() with one multi-token-prediction layer (the MTP head) and a context of `context`
// positions; with `dense`, dense Qwen3.5 (qwen3_5_text) rather than Qwen3-Next's MoE.
nlohmann::json small_config_with_mtp(int64_t context, bool dense = false);

// Every tensor of the model `config` describes (per-expert layout; the MTP head's too when the config declares one),
// random, stored as `dtype`.
std::vector<NamedTensor> synthetic_tensors(const nlohmann::json& config, uint64_t seed, DType dtype = DType::kF32);

// Writes dir/config.json and dir/model.safetensors.
void write_model_folder(const std::string& dir, const nlohmann::json& config, const std::vector<NamedTensor>& tensors);

}  // namespace plumb::test
