#include "model/synthetic_weights.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace plumb {
namespace {

using nlohmann::json;

// The keys both hybrid families share, at the released checkpoints' values (qwen3-next-spec.md §1).
json hybrid_base() {
  return {{"hidden_size", 2048},
          {"num_attention_heads", 16},
          {"num_key_value_heads", 2},
          {"head_dim", 256},
          {"rms_norm_eps", 1e-6},
          {"tie_word_embeddings", false},
          {"max_position_embeddings", 262144},
          {"attn_output_gate", true},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}},
          {"hidden_act", "silu"},
          {"full_attention_interval", 4},
          {"linear_conv_kernel_dim", 4},
          {"linear_key_head_dim", 128},
          {"linear_value_head_dim", 128},
          {"linear_num_key_heads", 16},
          {"linear_num_value_heads", 32},
          {"moe_intermediate_size", 512},
          {"shared_expert_intermediate_size", 512}};
}

// Qwen3-Next-80B-A3B has 48 layers; in BF16 that is ~160 GB, more than one H200's 141 GB. 32 layers (24 GDN + 8
// attention, the same 3:1 pattern) hold ~108 GB and leave room for states, activations and the benchmark's buffers.
constexpr int kQwen3NextLayers = 48;
constexpr int kQwen3NextReducedLayers = 32;

SyntheticConfig make(const std::string& name, json config_json, std::string description, std::string reduction) {
  SyntheticConfig s;
  s.config = parse_model_config(config_json.dump(), "synthetic model '" + name + "'");
  s.description = std::move(description);
  s.reduction = std::move(reduction);
  return s;
}

// splitmix64: decorrelated per-tensor seeds from one model seed.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Allocates and fills tensors on the backend, one fresh seed per tensor.
class Filler {
 public:
  Filler(Backend& backend, uint64_t seed, SyntheticWeights weights)
      : backend_(backend), seed_(seed), weights_(weights) {}

  Tensor uniform(DType dtype, const Shape& shape, float lo, float hi) {
    Tensor t = backend_.empty(dtype, shape);
    backend_.random_uniform(t, mix(seed_ + 0x5851f42d4c957f2dull * ++count_), lo, hi);
    return t;
  }
  // A BF16 projection whose last dimension is its fan-in.
  Tensor projection(const Shape& shape) {
    const float s = 1.0f / std::sqrt(static_cast<float>(shape.back()));
    return uniform(DType::kBF16, shape, -s, s);
  }
  // A projection the model's quantized checkpoints quantize: FP8 or NVFP4 codes and their scales when the model is.
  Tensor quantized(const Shape& shape) {
    if (weights_ == SyntheticWeights::kBF16) return projection(shape);
    if (weights_ == SyntheticWeights::kNvfp4) return nvfp4(shape);
    Tensor t = uniform(DType::kF8E4M3, shape, -448.0f, 448.0f);
    const float s = 1.0f / (448.0f * std::sqrt(static_cast<float>(shape.back())));
    Tensor scales = *t.block_scales();
    backend_.random_uniform(scales, mix(seed_ + 0x5851f42d4c957f2dull * ++count_), 0.5f * s, s);
    return t;
  }
  // NVFP4 codes: random E4M3 bytes read as E2M1 pairs (every nibble is a code), through an F8_E4M3 view of the same
  // memory; E4M3 group scales in [1, 2] and weight scales that bring the values to about ±1/sqrt(fan_in).
  Tensor nvfp4(const Shape& shape) {
    Tensor t = backend_.empty(DType::kE2M1, shape);
    Shape byte_shape = shape;
    byte_shape.back() /= 2;
    Tensor bytes(DType::kF8E4M3, byte_shape, t.device(), t.data(), t.owner());
    backend_.random_uniform(bytes, mix(seed_ + 0x5851f42d4c957f2dull * ++count_), -448.0f, 448.0f);
    Tensor groups = *t.group_scales();
    backend_.random_uniform(groups, mix(seed_ + 0x5851f42d4c957f2dull * ++count_), 1.0f, 2.0f);
    const float s = 1.0f / (12.0f * std::sqrt(static_cast<float>(shape.back())));
    Tensor scales = *t.block_scales();
    backend_.random_uniform(scales, mix(seed_ + 0x5851f42d4c957f2dull * ++count_), 0.5f * s, s);
    return t;
  }
  // A zero-centred norm weight: small offsets from 1.
  Tensor zero_centred_norm(int64_t d) { return uniform(DType::kF32, {d}, -0.1f, 0.1f); }

 private:
  Backend& backend_;
  uint64_t seed_;
  SyntheticWeights weights_;
  uint64_t count_ = 0;
};

MlpWeights mlp(Filler& f, int64_t width, int64_t H) {
  MlpWeights w;
  w.gate_proj = f.quantized({width, H});
  w.up_proj = f.quantized({width, H});
  w.down_proj = f.quantized({H, width});
  return w;
}

GdnWeights gated_deltanet(Filler& f, const ModelConfig& c) {
  const int64_t H = c.hidden_size, nv = c.linear_num_value_heads, C = c.conv_dim(), K = c.linear_conv_kernel_dim;
  GdnWeights w;
  w.in_proj_qkv = f.quantized({C, H});
  w.in_proj_z = f.quantized({c.value_dim(), H});
  w.in_proj_b = f.projection({nv, H});
  w.in_proj_a = f.projection({nv, H});
  const float conv_scale = 1.0f / std::sqrt(static_cast<float>(K));
  w.conv1d = f.uniform(DType::kF32, {C, K}, -conv_scale, conv_scale);
  // Real checkpoints hold A_log ≈ log(1..16) and dt_bias near 0; any values in these ranges give decays in (0, 1).
  w.A_log = f.uniform(DType::kF32, {nv}, 0.0f, 2.0f);
  w.dt_bias = f.uniform(DType::kF32, {nv}, -1.0f, 1.0f);
  w.norm = f.uniform(DType::kF32, {c.linear_value_head_dim}, 0.9f, 1.1f);  // plain weight, near 1
  w.out_proj = f.quantized({H, c.value_dim()});
  return w;
}

AttentionWeights full_attention(Filler& f, const ModelConfig& c) {
  const int64_t H = c.hidden_size, nq = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  AttentionWeights w;
  w.q_proj = f.quantized({nq * d * (c.attn_output_gate ? 2 : 1), H});
  w.k_proj = f.quantized({nkv * d, H});
  w.v_proj = f.quantized({nkv * d, H});
  w.o_proj = f.quantized({H, nq * d});
  w.q_norm = f.zero_centred_norm(d);
  w.k_norm = f.zero_centred_norm(d);
  return w;
}

MoeWeights mixture_of_experts(Filler& f, const ModelConfig& c) {
  const int64_t H = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
  MoeWeights w;
  w.router = f.projection({E, H});
  w.experts.gate_up = f.quantized({E, 2 * I, H});
  w.experts.down = f.quantized({E, H, I});
  w.has_shared_expert = c.shared_expert_intermediate_size > 0;
  if (w.has_shared_expert) {
    w.shared_expert = mlp(f, c.shared_expert_intermediate_size, H);
    w.shared_expert_gate = f.projection({1, H});
  }
  return w;
}

}  // namespace

std::vector<std::string> synthetic_config_names() {
  return {"qwen3.5-35b-a3b", "qwen3-next-80b-a3b", "qwen3-next-80b-a3b-reduced", "tiny"};
}

SyntheticConfig synthetic_config(const std::string& name) {
  if (name == "qwen3.5-35b-a3b") {
    json j = hybrid_base();
    j.update({{"model_type", "qwen3_5_moe_text"},
              {"vocab_size", 248320},
              {"num_hidden_layers", 40},
              {"num_experts", 256},
              {"num_experts_per_tok", 8}});
    return make(name, j, "Qwen3.5-35B-A3B: 40 layers (30 GDN + 10 attention), 256 experts top-8 + shared", "");
  }
  if (name == "qwen3-next-80b-a3b" || name == "qwen3-next-80b-a3b-reduced") {
    const bool reduced = name == "qwen3-next-80b-a3b-reduced";
    json j = hybrid_base();
    j.update({{"model_type", "qwen3_next"},
              {"vocab_size", 151936},
              {"num_hidden_layers", reduced ? kQwen3NextReducedLayers : kQwen3NextLayers},
              {"intermediate_size", 5120},
              {"decoder_sparse_step", 1},
              {"norm_topk_prob", true},
              {"num_experts", 512},
              {"num_experts_per_tok", 10}});
    if (!reduced) {
      return make(name, j,
                  "Qwen3-Next-80B-A3B: 48 layers (36 GDN + 12 attention), 512 experts top-10 + shared (~160 GB in "
                  "BF16, more than one H200 holds: run it with --weights fp8)",
                  "");
    }
    return make(name, j, "Qwen3-Next-80B-A3B: 512 experts top-10 + shared",
                fmt::format("{} of its {} layers ({} GDN + {} attention, the same 3:1 pattern): the full BF16 model "
                            "(~160 GB) does not fit one H200; per-step bytes and times cover {:.0f}% of the layers",
                            kQwen3NextReducedLayers, kQwen3NextLayers, kQwen3NextReducedLayers * 3 / 4,
                            kQwen3NextReducedLayers / 4, 100.0 * kQwen3NextReducedLayers / kQwen3NextLayers));
  }
  if (name == "tiny") {
    const json j = {
        {"model_type", "qwen3_5_moe_text"},
        {"vocab_size", 512},
        {"hidden_size", 64},
        {"num_hidden_layers", 4},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"head_dim", 32},
        {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.25}}},
        {"full_attention_interval", 4},
        {"linear_key_head_dim", 16},
        {"linear_value_head_dim", 16},
        {"linear_num_key_heads", 2},
        {"linear_num_value_heads", 4},
        {"num_experts", 8},
        {"num_experts_per_tok", 2},
        {"moe_intermediate_size", 32},
        {"shared_expert_intermediate_size", 32}};
    return make(name, j, "tiny: 4 layers (3 GDN + 1 attention), hidden 64, 8 experts top-2 + shared (smoke tests)", "");
  }
  std::string names;
  for (const std::string& n : synthetic_config_names()) names += (names.empty() ? "" : ", ") + n;
  PLUMB_FAIL("unknown synthetic model '{}' (known: {})", name, names);
}

namespace {

LayerWeights decoder_layer(Filler& f, const ModelConfig& c, LayerKind kind, MlpKind mlp_kind) {
  LayerWeights l;
  l.kind = kind;
  l.mlp_kind = mlp_kind;
  l.input_norm = f.zero_centred_norm(c.hidden_size);
  l.post_attn_norm = f.zero_centred_norm(c.hidden_size);
  if (kind == LayerKind::kGatedDeltaNet)
    l.gdn = gated_deltanet(f, c);
  else
    l.attn = full_attention(f, c);
  if (mlp_kind == MlpKind::kMoe)
    l.moe = mixture_of_experts(f, c);
  else
    l.mlp = mlp(f, c.intermediate_size, c.hidden_size);
  return l;
}

ModelWeights synthetic_weights(const ModelConfig& config, Backend& backend, uint64_t seed, SyntheticWeights weights,
                               bool mtp) {
  const ModelConfig& c = config;
  const int64_t H = c.hidden_size;
  Filler f(backend, seed, weights);
  ModelWeights w;
  w.embed_tokens = f.uniform(DType::kBF16, {c.vocab_size, H}, -1.0f, 1.0f);
  for (int64_t i = 0; i < c.num_layers; ++i) w.layers.push_back(decoder_layer(f, c, c.layer_types[i], c.mlp_kinds[i]));
  w.final_norm = f.zero_centred_norm(H);
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : f.projection({c.vocab_size, H});
  if (mtp) {
    // After every other weight, so the main model's draws are the same with the head or without it. The published
    // FP8 checkpoints leave mtp.fc in BF16; the head's layer is quantized as the main layers are.
    MtpWeights& m = w.mtp.emplace();
    m.pre_fc_norm_embedding = f.zero_centred_norm(H);
    m.pre_fc_norm_hidden = f.zero_centred_norm(H);
    m.fc_embedding = f.projection({H, H});
    m.fc_hidden = f.projection({H, H});
    m.layer = decoder_layer(f, c, LayerKind::kFullAttention, c.mtp_mlp_kind());
    m.norm = f.zero_centred_norm(H);
  }
  return w;
}

}  // namespace

Qwen3NextModel synthetic_model(const ModelConfig& config, Backend& backend, uint64_t seed, SyntheticWeights weights,
                               bool mtp) {
  return Qwen3NextModel(config, synthetic_weights(config, backend, seed, weights, mtp), backend);
}

SyntheticWeights parse_synthetic_weights(const std::string& name) {
  if (name == "bf16") return SyntheticWeights::kBF16;
  if (name == "fp8") return SyntheticWeights::kFp8;
  if (name == "nvfp4") return SyntheticWeights::kNvfp4;
  PLUMB_FAIL("--weights {}: expected bf16, fp8 or nvfp4", name);
}

const char* synthetic_weights_name(SyntheticWeights weights) {
  switch (weights) {
    case SyntheticWeights::kFp8:
      return "fp8";
    case SyntheticWeights::kNvfp4:
      return "nvfp4";
    case SyntheticWeights::kBF16:
      break;
  }
  return "bf16";
}

}  // namespace plumb
