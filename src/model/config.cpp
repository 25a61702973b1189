#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "core/json_depth.h"

namespace plumb {
namespace {

using nlohmann::json;

// Far past any released model (Qwen3-Next has 48 layers), and small enough that the per-layer lists a lying
// config.json sizes cannot exhaust memory.
constexpr int64_t kMaxLayers = 4096;

// Reads typed fields out of one JSON object, naming the file and key in every error.
class FieldReader {
 public:
  FieldReader(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  bool has(const char* key) const { return object_.contains(key) && !object_.at(key).is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) return require(key, fallback);
    const json& v = object_.at(key);
    PLUMB_CHECK(v.is_number_integer(), "{}: field '{}' must be an integer, got {}", where_, key, v.dump());
    return v.get<int64_t>();
  }
  double number(const char* key, std::optional<double> fallback = std::nullopt) const {
    if (!has(key)) return require(key, fallback);
    const json& v = object_.at(key);
    PLUMB_CHECK(v.is_number(), "{}: field '{}' must be a number, got {}", where_, key, v.dump());
    return v.get<double>();
  }
  bool boolean(const char* key, std::optional<bool> fallback = std::nullopt) const {
    if (!has(key)) return require(key, fallback);
    const json& v = object_.at(key);
    PLUMB_CHECK(v.is_boolean(), "{}: field '{}' must be true or false, got {}", where_, key, v.dump());
    return v.get<bool>();
  }
  std::string string(const char* key) const {
    PLUMB_CHECK(has(key), "{}: missing field '{}'", where_, key);
    const json& v = object_.at(key);
    PLUMB_CHECK(v.is_string(), "{}: field '{}' must be a string, got {}", where_, key, v.dump());
    return v.get<std::string>();
  }
  const json& object(const char* key) const {
    PLUMB_CHECK(has(key) && object_.at(key).is_object(), "{}: field '{}' must be an object", where_, key);
    return object_.at(key);
  }
  std::vector<int64_t> integers(const char* key) const {
    if (!has(key)) return {};
    const json& v = object_.at(key);
    if (v.is_number_integer()) return {v.get<int64_t>()};
    PLUMB_CHECK(v.is_array(), "{}: field '{}' must be an integer or a list of integers", where_, key);
    std::vector<int64_t> out;
    for (const json& e : v) {
      PLUMB_CHECK(e.is_number_integer(), "{}: field '{}' holds a non-integer {}", where_, key, e.dump());
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  std::vector<std::string> strings(const char* key) const {
    if (!has(key)) return {};
    const json& v = object_.at(key);
    PLUMB_CHECK(v.is_array(), "{}: field '{}' must be a list of strings", where_, key);
    std::vector<std::string> out;
    for (const json& e : v) {
      PLUMB_CHECK(e.is_string(), "{}: field '{}' holds a non-string {}", where_, key, e.dump());
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  const std::string& where() const { return where_; }

 private:
  template <typename T>
  T require(const char* key, std::optional<T> fallback) const {
    PLUMB_CHECK(fallback.has_value(), "{}: missing field '{}'", where_, key);
    return *fallback;
  }

  const json& object_;
  std::string where_;
};

// Hugging Face's defaults for the keys a config.json may leave out, per family.
struct Defaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_layers, num_attention_heads, num_key_value_heads;
  int64_t num_experts, num_experts_per_tok;
};
Defaults defaults_for(ModelFamily family) {
  switch (family) {
    case ModelFamily::kQwen3Next:
      return {151936, 2048, 5632, 48, 16, 2, 512, 10};
    case ModelFamily::kQwen35Dense:
      return {248320, 4096, 12288, 32, 16, 4, 0, 0};
    case ModelFamily::kQwen35Moe:
      return {248320, 2048, 0, 40, 16, 2, 256, 8};
  }
  PLUMB_FAIL("unknown model family");
}

void parse_rope(const FieldReader& f, ModelConfig& c) {
  // Newer configs: rope_parameters {rope_type, rope_theta, partial_rotary_factor, mrope_section, ...}. Older ones:
  // top-level rope_theta / partial_rotary_factor and an optional rope_scaling.
  c.rope_theta = f.number("rope_theta", 10000.0);
  c.partial_rotary_factor = f.number("partial_rotary_factor", 0.25);
  const char* scaling_key = f.has("rope_parameters") ? "rope_parameters"
                            : f.has("rope_scaling")  ? "rope_scaling"
                                                     : nullptr;
  if (!scaling_key) return;
  const json& rope = f.object(scaling_key);
  const std::string where = f.where() + ": " + scaling_key;
  const FieldReader r(rope, where);
  std::string type = "default";
  if (r.has("rope_type"))
    type = r.string("rope_type");
  else if (r.has("type"))
    type = r.string("type");
  // M-RoPE ("mrope_section") splits the rotary frequencies between the text, height and width positions; for text
  // all three positions are the token position, so it is exactly the 1-D rotary embedding.
  PLUMB_CHECK(type == "default" || type == "mrope", "{}: rope_type '{}' is not supported (only 'default')", where,
              type);
  if (r.has("rope_theta")) c.rope_theta = r.number("rope_theta");
  if (r.has("partial_rotary_factor")) c.partial_rotary_factor = r.number("partial_rotary_factor");
}

void parse_layer_types(const FieldReader& f, const json& text, ModelConfig& c) {
  c.layer_types.clear();
  if (f.has("layer_types")) {
    const json& list = text.at("layer_types");
    PLUMB_CHECK(list.is_array(), "{}: field 'layer_types' must be a list", f.where());
    for (const json& e : list) {
      PLUMB_CHECK(e.is_string(), "{}: layer_types holds a non-string {}", f.where(), e.dump());
      const std::string name = e.get<std::string>();
      if (name == "linear_attention")
        c.layer_types.push_back(LayerKind::kGatedDeltaNet);
      else if (name == "full_attention" || name == "attention")
        c.layer_types.push_back(LayerKind::kFullAttention);
      else
        PLUMB_FAIL("{}: layer_types holds unknown layer type '{}'", f.where(), name);
    }
    PLUMB_CHECK(static_cast<int64_t>(c.layer_types.size()) == c.num_layers,
                "{}: layer_types has {} entries for num_hidden_layers {}", f.where(), c.layer_types.size(),
                c.num_layers);
    return;
  }
  const int64_t interval = f.integer("full_attention_interval", 4);
  PLUMB_CHECK(interval >= 1, "{}: full_attention_interval must be at least 1, got {}", f.where(), interval);
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::kFullAttention : LayerKind::kGatedDeltaNet);
}

void parse_mlp_kinds(const FieldReader& f, ModelConfig& c) {
  c.mlp_kinds.assign(c.num_layers, MlpKind::kDense);
  if (c.family == ModelFamily::kQwen35Dense) return;
  if (c.family == ModelFamily::kQwen35Moe) {
    c.mlp_kinds.assign(c.num_layers, MlpKind::kMoe);
    return;
  }
  const int64_t sparse_step = f.integer("decoder_sparse_step", 1);
  PLUMB_CHECK(sparse_step >= 1, "{}: decoder_sparse_step must be at least 1, got {}", f.where(), sparse_step);
  const std::vector<int64_t> only = f.integers("mlp_only_layers");
  const std::set<int64_t> mlp_only(only.begin(), only.end());
  for (int64_t i = 0; i < c.num_layers; ++i)
    if (!mlp_only.count(i) && c.num_experts > 0 && (i + 1) % sparse_step == 0) c.mlp_kinds[i] = MlpKind::kMoe;
}

// ModelOpt's description of its quantization: hf_quant_config.json's "quantization" object (group_size,
// exclude_modules, kv_cache_quant_algo), or config.json's quantization_config with quant_method "modelopt" (the
// weights' group size under config_groups, the exclusions as "ignore"). plumb reads NVFP4 weights, groups of 16.
void parse_modelopt(const FieldReader& q, ModelConfig& c) {
  const std::string algo = q.string("quant_algo");
  PLUMB_CHECK(algo == "NVFP4", "{}: quant_algo '{}' is not supported (plumb reads ModelOpt's NVFP4)", q.where(), algo);
  Nvfp4Quantization n;
  // NVIDIA's NVFP4 builds declare an FP8 KV cache and store a calibrated k_scale / v_scale beside each attention
  // layer's k_proj / v_proj. plumb keeps the cache in BF16 (the model's own precision, what its BF16 parent ran
  // with), so the scales are checked and not applied; any other KV format is refused.
  if (q.has("kv_cache_quant_algo")) {
    const std::string kv = q.string("kv_cache_quant_algo");
    PLUMB_CHECK(kv == "FP8" || kv == "fp8",
                "{}: kv_cache_quant_algo '{}' is not supported (plumb reads 'FP8' KV scales and keeps the cache in "
                "BF16)",
                q.where(), kv);
    n.fp8_kv_cache_declared = true;
  }
  if (q.has("kv_cache_scheme")) {
    const FieldReader kv(q.object("kv_cache_scheme"), q.where() + ".kv_cache_scheme");
    PLUMB_CHECK(kv.integer("num_bits") == 8 && kv.string("type") == "float",
                "{}: only an 8-bit float KV cache is understood (plumb keeps the cache in BF16)", kv.where());
    n.fp8_kv_cache_declared = true;
  }
  n.group_size = q.integer("group_size", 16);
  if (q.has("config_groups")) {
    for (const auto& [group, spec] : q.object("config_groups").items()) {
      const FieldReader g(spec, q.where() + ": config_groups." + group);
      if (g.has("weights")) {
        const FieldReader w(g.object("weights"), g.where() + ".weights");
        n.group_size = w.integer("group_size", n.group_size);
        PLUMB_CHECK(n.group_size == 16, "{}: group_size {} does not match NVFP4's groups of 16", w.where(),
                    n.group_size);
      }
    }
  }
  PLUMB_CHECK(n.group_size == 16, "{}: group_size {} does not match NVFP4's groups of 16", q.where(), n.group_size);
  n.exclude_modules = q.strings("exclude_modules");
  for (std::string& module : q.strings("ignore")) n.exclude_modules.push_back(std::move(module));
  c.nvfp4 = std::move(n);
}

void parse_quantization(const json& root, const std::string& source, ModelConfig& c) {
  if (!root.contains("quantization_config") || root.at("quantization_config").is_null()) return;
  const FieldReader q(root.at("quantization_config"), source + ": quantization_config");
  const std::string method = q.string("quant_method");
  if (method == "modelopt") return parse_modelopt(q, c);
  PLUMB_CHECK(method == "fp8", "{}: quant_method '{}' is not supported (only 'fp8' and 'modelopt')", q.where(), method);
  if (q.has("fmt")) {
    const std::string fmt_name = q.string("fmt");
    PLUMB_CHECK(fmt_name == "e4m3", "{}: fmt '{}' is not supported (only 'e4m3')", q.where(), fmt_name);
  }
  if (q.has("activation_scheme")) {
    const std::string scheme = q.string("activation_scheme");
    PLUMB_CHECK(scheme == "dynamic", "{}: activation_scheme '{}' is not supported (only 'dynamic')", q.where(), scheme);
  }
  const std::vector<int64_t> block = q.integers("weight_block_size");
  PLUMB_CHECK(block.size() == 2 && block[0] > 0 && block[1] > 0,
              "{}: weight_block_size must be two positive integers (per-block FP8)", q.where());
  c.fp8 = Fp8Quantization{block[0], block[1]};
}

void validate(const ModelConfig& c, const std::string& where) {
  auto positive = [&](int64_t v, const char* name) {
    PLUMB_CHECK(v > 0, "{}: {} must be positive, got {}", where, name, v);
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.num_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.linear_conv_kernel_dim, "linear_conv_kernel_dim");
  positive(c.linear_key_head_dim, "linear_key_head_dim");
  positive(c.linear_value_head_dim, "linear_value_head_dim");
  positive(c.linear_num_key_heads, "linear_num_key_heads");
  positive(c.linear_num_value_heads, "linear_num_value_heads");
  positive(c.max_position_embeddings, "max_position_embeddings");
  PLUMB_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0, "{}: rms_norm_eps must be a finite positive number",
              where);
  PLUMB_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0,
              "{}: rope_theta must be a finite positive number, got {}", where, c.rope_theta);
  PLUMB_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where, c.num_attention_heads,
              c.num_key_value_heads);
  PLUMB_CHECK(c.linear_num_value_heads % c.linear_num_key_heads == 0,
              "{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", where,
              c.linear_num_value_heads, c.linear_num_key_heads);
  PLUMB_CHECK(c.rotary_dim >= 2 && c.rotary_dim % 2 == 0 && c.rotary_dim <= c.head_dim,
              "{}: partial_rotary_factor {} gives rotary dimension {} for head_dim {}", where, c.partial_rotary_factor,
              c.rotary_dim, c.head_dim);
  bool any_moe = false, any_dense = false;
  for (MlpKind k : c.mlp_kinds) (k == MlpKind::kMoe ? any_moe : any_dense) = true;
  if (any_dense) positive(c.intermediate_size, "intermediate_size");
  if (any_moe) {
    positive(c.num_experts, "num_experts");
    positive(c.moe_intermediate_size, "moe_intermediate_size");
    PLUMB_CHECK(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.num_experts,
                "{}: num_experts_per_tok {} must be in [1, num_experts {}]", where, c.num_experts_per_tok,
                c.num_experts);
    PLUMB_CHECK(c.shared_expert_intermediate_size >= 0, "{}: shared_expert_intermediate_size must not be negative",
                where);
  }
}

}  // namespace

int ModelConfig::num_layers_of(LayerKind kind) const {
  int n = 0;
  for (LayerKind k : layer_types) n += k == kind;
  return n;
}

const char* layer_kind_name(LayerKind kind) {
  return kind == LayerKind::kGatedDeltaNet ? "gated_deltanet" : "full_attention";
}

const char* model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kQwen3Next:
      return "qwen3_next";
    case ModelFamily::kQwen35Dense:
      return "qwen3_5_text";
    case ModelFamily::kQwen35Moe:
      return "qwen3_5_moe_text";
  }
  return "?";
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  check_json_depth(json_text, source);
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {  // a syntax error, or a number past the range of its type (406)
    PLUMB_FAIL("{}: not valid JSON ({})", source, e.what());
  }
  PLUMB_CHECK(root.is_object(), "{}: expected a JSON object", source);
  const FieldReader top(root, source);
  ModelConfig c;
  c.model_type = top.string("model_type");

  // The multimodal wrappers keep the language model under text_config and its tensors under model.language_model.
  const json* text = &root;
  std::string where = source;
  std::string text_type = c.model_type;
  if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_moe") {
    text = &top.object("text_config");
    where = source + ": text_config";
    text_type = c.model_type + "_text";
    c.tensor_prefix = "model.language_model.";
  }
  if (text_type == "qwen3_next")
    c.family = ModelFamily::kQwen3Next;
  else if (text_type == "qwen3_5_text")
    c.family = ModelFamily::kQwen35Dense;
  else if (text_type == "qwen3_5_moe_text")
    c.family = ModelFamily::kQwen35Moe;
  else
    PLUMB_FAIL(
        "{}: model_type '{}' is not supported (plumb reads qwen3_next, qwen3_5_text, qwen3_5_moe_text, qwen3_5, "
        "qwen3_5_moe)",
        source, c.model_type);

  const FieldReader f(*text, where);
  const Defaults d = defaults_for(c.family);
  c.vocab_size = f.integer("vocab_size", d.vocab_size);
  c.hidden_size = f.integer("hidden_size", d.hidden_size);
  c.num_layers = f.integer("num_hidden_layers", d.num_layers);
  // Checked here, not only in validate(): the layer lists below are sized by it.
  PLUMB_CHECK(c.num_layers > 0 && c.num_layers <= kMaxLayers, "{}: num_hidden_layers must be in 1..{}, got {}", where,
              kMaxLayers, c.num_layers);
  c.intermediate_size = f.integer("intermediate_size", d.intermediate_size);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = top.has("tie_word_embeddings") && text != &root ? top.boolean("tie_word_embeddings")
                                                                          : f.boolean("tie_word_embeddings", false);
  c.max_position_embeddings = f.integer("max_position_embeddings", 32768);

  c.num_attention_heads = f.integer("num_attention_heads", d.num_attention_heads);
  c.num_key_value_heads = f.integer("num_key_value_heads", d.num_key_value_heads);
  c.head_dim = f.integer("head_dim", c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.attn_output_gate = f.boolean("attn_output_gate", true);
  PLUMB_CHECK(!f.boolean("attention_bias", false), "{}: attention_bias true is not supported", where);
  parse_rope(f, c);
  // Checked before the product is cast: an infinite factor would make the cast undefined.
  PLUMB_CHECK(std::isfinite(c.partial_rotary_factor) && c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1,
              "{}: partial_rotary_factor must be in (0, 1], got {}", where, c.partial_rotary_factor);
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);

  c.linear_conv_kernel_dim = f.integer("linear_conv_kernel_dim", 4);
  c.linear_key_head_dim = f.integer("linear_key_head_dim", 128);
  c.linear_value_head_dim = f.integer("linear_value_head_dim", 128);
  c.linear_num_key_heads = f.integer("linear_num_key_heads", 16);
  c.linear_num_value_heads = f.integer("linear_num_value_heads", 32);

  if (c.family != ModelFamily::kQwen35Dense) {
    c.num_experts = f.integer("num_experts", d.num_experts);
    c.num_experts_per_tok = f.integer("num_experts_per_tok", d.num_experts_per_tok);
    c.moe_intermediate_size = f.integer("moe_intermediate_size", 512);
    c.shared_expert_intermediate_size = f.integer("shared_expert_intermediate_size", 512);
    c.norm_topk_prob = c.family == ModelFamily::kQwen35Moe ? true : f.boolean("norm_topk_prob", true);
  }
  if (f.has("hidden_act")) {
    const std::string act = f.string("hidden_act");
    PLUMB_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (only 'silu')", where, act);
  }
  // Qwen's checkpoints write mtp_num_hidden_layers; vLLM's name for it is num_nextn_predict_layers.
  c.mtp_layers = f.integer("mtp_num_hidden_layers", f.integer("num_nextn_predict_layers", 0));
  PLUMB_CHECK(c.mtp_layers >= 0 && c.mtp_layers <= kMaxLayers,
              "{}: mtp_num_hidden_layers (num_nextn_predict_layers) must be in 0..{}, got {}", where, kMaxLayers,
              c.mtp_layers);
  parse_layer_types(f, *text, c);
  parse_mlp_kinds(f, c);
  parse_quantization(root, source, c);
  c.eos_token_ids = f.integers("eos_token_id");
  if (c.eos_token_ids.empty()) c.eos_token_ids = top.integers("eos_token_id");
  validate(c, where);
  return c;
}

void parse_hf_quant_config(const std::string& json_text, const std::string& source, ModelConfig& c) {
  check_json_depth(json_text, source);
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    PLUMB_FAIL("{}: not valid JSON ({})", source, e.what());
  }
  PLUMB_CHECK(root.is_object(), "{}: expected a JSON object", source);
  PLUMB_CHECK(!c.fp8.has_value(), "{}: a ModelOpt quantization beside config.json's fp8 quantization_config", source);
  parse_modelopt(FieldReader(FieldReader(root, source).object("quantization"), source + ": quantization"), c);
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  PLUMB_CHECK(std::filesystem::exists(path), "cannot open {} (is {} a model folder?)", path, model_dir);
  ModelConfig c = parse_model_config(read_regular_file(path), path);
  // ModelOpt's exports describe their quantization in a file of their own.
  const std::string quant_path = model_dir + "/hf_quant_config.json";
  if (const auto text = read_regular_file_if_exists(quant_path)) parse_hf_quant_config(*text, quant_path, c);
  return c;
}

}  // namespace plumb
