// ModelConfig: a model folder's config.json, parsed once into typed, validated fields. Nothing else in plumb reads
// config.json; defaults for keys a file leaves out are those of the Hugging Face config classes, set here only.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace plumb {

enum class ModelFamily {
  kQwen3Next,    // model_type qwen3_next: fused, group-interleaved in_proj_qkvz / in_proj_ba; MoE by flags
  kQwen35Dense,  // qwen3_5_text (or the qwen3_5 wrapper's text_config): separate projections, dense MLP
  kQwen35Moe,    // qwen3_5_moe_text (or qwen3_5_moe): separate projections, MoE in every layer, always renormalized
};

enum class LayerKind { kGatedDeltaNet, kFullAttention };
enum class MlpKind { kDense, kMoe };

// Fine-grained FP8 ("quant_method": "fp8") weights with per-block dequantization multipliers.
struct Fp8Quantization {
  int64_t block_rows = 128;  // weight_block_size[0], along the output features
  int64_t block_cols = 128;  // weight_block_size[1], along the input features
};

// NVIDIA ModelOpt NVFP4 weights (hf_quant_config.json "quant_algo": "NVFP4", or config.json's quantization_config
// with "quant_method": "modelopt"): a quantized projection stores packed E2M1 pairs (U8 [N, K/2]), an E4M3 scale per
// group of 16 along K (weight_scale [N, K/16]) and one F32 scale for the whole weight (weight_scale_2).
struct Nvfp4Quantization {
  int64_t group_size = 16;
  std::vector<std::string> exclude_modules;  // modules left unquantized, as written ('*' matches any run of characters)
  bool fp8_kv_cache_declared = false;        // kv_cache_quant_algo FP8: k/v scales may sit beside k_proj / v_proj
};

struct ModelConfig {
  std::string model_type;  // as written in config.json (the wrapper's, for qwen3_5 / qwen3_5_moe)
  ModelFamily family = ModelFamily::kQwen3Next;
  std::string tensor_prefix = "model.";  // "model.language_model." for the multimodal wrappers

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t intermediate_size = 0;  // dense-MLP layers only
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;

  // Gated full attention.
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  bool attn_output_gate = true;  // q_proj holds a sigmoid output gate beside each query head
  double rope_theta = 10000.0;
  double partial_rotary_factor = 0.25;
  int64_t rotary_dim = 0;  // int(head_dim * partial_rotary_factor), even

  // Gated DeltaNet.
  int64_t linear_conv_kernel_dim = 4;
  int64_t linear_key_head_dim = 0;     // dk
  int64_t linear_value_head_dim = 0;   // dv
  int64_t linear_num_key_heads = 0;    // nk
  int64_t linear_num_value_heads = 0;  // nv, a multiple of nk

  // Mixture of experts.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;

  // Multi-token prediction: the decoder layers of the checkpoint's MTP head (mtp.*), which drafts tokens for
  // speculative decoding; 0 when config.json declares none.
  int64_t mtp_layers = 0;

  std::vector<LayerKind> layer_types;  // [num_layers]
  std::vector<MlpKind> mlp_kinds;      // [num_layers]
  std::optional<Fp8Quantization> fp8;
  std::optional<Nvfp4Quantization> nvfp4;
  std::vector<int64_t> eos_token_ids;

  // Derived sizes.
  int64_t key_dim() const { return linear_num_key_heads * linear_key_head_dim; }        // nk * dk
  int64_t value_dim() const { return linear_num_value_heads * linear_value_head_dim; }  // nv * dv
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }                      // q, k, v channels
  int64_t value_heads_per_key_head() const { return linear_num_value_heads / linear_num_key_heads; }
  int num_layers_of(LayerKind kind) const;
  // The MTP head's layer's MLP: a mixture of experts in the MoE families, dense in dense Qwen3.5.
  MlpKind mtp_mlp_kind() const {
    return num_experts > 0 && family != ModelFamily::kQwen35Dense ? MlpKind::kMoe : MlpKind::kDense;
  }
};

// Parses config.json text; `source` names the file in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
// Applies the text of a ModelOpt hf_quant_config.json (its "quantization" object) to a parsed config; `source` names
// the file in error messages.
void parse_hf_quant_config(const std::string& json_text, const std::string& source, ModelConfig& c);
// Reads and parses DIR/config.json, and DIR/hf_quant_config.json where there is one.
ModelConfig load_model_config(const std::string& model_dir);

const char* layer_kind_name(LayerKind kind);
const char* model_family_name(ModelFamily family);

}  // namespace plumb
