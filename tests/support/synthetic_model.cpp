#include "support/synthetic_model.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "model/weight_table.h"

namespace plumb::test {

nlohmann::json small_qwen3_next_config() {
  return {{"model_type", "qwen3_next"},
          {"vocab_size", 50},
          {"hidden_size", 16},
          {"num_hidden_layers", 3},
          {"layer_types", {"linear_attention", "linear_attention", "full_attention"}},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"head_dim", 8},
          {"linear_num_key_heads", 1},
          {"linear_num_value_heads", 2},
          {"linear_key_head_dim", 4},
          {"linear_value_head_dim", 6},
          {"num_experts", 4},
          {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 8},
          {"shared_expert_intermediate_size", 8},
          {"intermediate_size", 24},
          {"tie_word_embeddings", false}};
}

nlohmann::json small_config_with_mtp(int64_t context, bool dense) {
  nlohmann::json config = small_qwen3_next_config();
  config["mtp_num_hidden_layers"] = 1;
  config["max_position_embeddings"] = context;
  if (dense) config["model_type"] = "qwen3_5_text";
  return config;
}

std::vector<NamedTensor> synthetic_tensors(const nlohmann::json& config, uint64_t seed, DType dtype) {
  const ModelConfig c = parse_model_config(config.dump(), "synthetic config.json");
  ModelWeights unused;
  const std::vector<WeightSlot> table = build_weight_table(
      c, unused, [](const std::string&) { return false; }, c.mtp_layers > 0);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.3f);
  std::vector<NamedTensor> tensors;
  for (const WeightSlot& slot : table) {
    std::vector<float> values(static_cast<size_t>(shape_numel(slot.shape)));
    for (float& v : values) v = dist(rng);
    tensors.push_back(make_tensor(slot.name, dtype, slot.shape, values));
  }
  return tensors;
}

void write_model_folder(const std::string& dir, const nlohmann::json& config, const std::vector<NamedTensor>& tensors) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config.dump(2);
  write_safetensors(dir + "/model.safetensors", tensors);
}

}  // namespace plumb::test
