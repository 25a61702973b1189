// config.json parsing: the families, both rope forms, the multimodal wrappers, layer patterns, FP8, and bad fields.
#include "model/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace plumb {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json tiny_next() {
  return json{{"model_type", "qwen3_next"},
              {"vocab_size", 100},
              {"hidden_size", 32},
              {"num_hidden_layers", 8},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 16},
              {"linear_num_key_heads", 2},
              {"linear_num_value_heads", 4},
              {"linear_key_head_dim", 8},
              {"linear_value_head_dim", 12},
              {"num_experts", 4},
              {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 8},
              {"intermediate_size", 24},
              {"shared_expert_intermediate_size", 8}};
}

std::string error_of(const json& j) {
  try {
    parse_model_config(j.dump(), "dir/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelConfig, Qwen3NextDefaultsAndDerivedPattern) {
  const ModelConfig c = parse_model_config(tiny_next().dump(), "config.json");
  EXPECT_EQ(c.family, ModelFamily::kQwen3Next);
  EXPECT_EQ(c.tensor_prefix, "model.");
  ASSERT_EQ(c.layer_types.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c.layer_types[i], (i + 1) % 4 == 0 ? LayerKind::kFullAttention : LayerKind::kGatedDeltaNet) << i;
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rotary_dim, 4);  // 16 * 0.25
  EXPECT_EQ(c.conv_dim(), 2 * 16 + 48);
  EXPECT_TRUE(c.norm_topk_prob);
  for (MlpKind k : c.mlp_kinds) EXPECT_EQ(k, MlpKind::kMoe);
}

TEST(ModelConfig, MlpOnlyLayersAndSparseStep) {
  json j = tiny_next();
  j["mlp_only_layers"] = {0, 5};
  j["decoder_sparse_step"] = 2;
  const ModelConfig c = parse_model_config(j.dump(), "config.json");
  const std::vector<MlpKind> expected = {MlpKind::kDense, MlpKind::kMoe,   MlpKind::kDense, MlpKind::kMoe,
                                         MlpKind::kDense, MlpKind::kDense, MlpKind::kDense, MlpKind::kMoe};
  EXPECT_EQ(c.mlp_kinds, expected);
}

TEST(ModelConfig, RopeParametersFormWinsOverDefaults) {
  json j = tiny_next();
  j["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", 1e7},
                          {"partial_rotary_factor", 0.5},
                          {"mrope_section", {2, 1, 1}},
                          {"mrope_interleaved", true}};
  const ModelConfig c = parse_model_config(j.dump(), "config.json");
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.rotary_dim, 8);
  json old = tiny_next();
  old["rope_theta"] = 5e6;
  old["partial_rotary_factor"] = 0.5;
  old["rope_scaling"] = nullptr;
  const ModelConfig o = parse_model_config(old.dump(), "config.json");
  EXPECT_EQ(o.rope_theta, 5e6);
  EXPECT_EQ(o.rotary_dim, 8);
}

TEST(ModelConfig, ExplicitLayerTypes) {
  json j = tiny_next();
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "linear_attention", "full_attention"};
  const ModelConfig c = parse_model_config(j.dump(), "config.json");
  EXPECT_EQ(c.layer_types,
            (std::vector<LayerKind>{LayerKind::kFullAttention, LayerKind::kGatedDeltaNet, LayerKind::kFullAttention}));
  j["layer_types"] = {"full_attention", "linear_attention"};
  EXPECT_THAT(error_of(j), HasSubstr("layer_types has 2 entries for num_hidden_layers 3"));
  j["layer_types"] = {"full_attention", "mamba", "full_attention"};
  EXPECT_THAT(error_of(j), HasSubstr("unknown layer type 'mamba'"));
}

// Found by checkpoint_fuzz: the per-layer lists were sized by a negative count before validate() saw it, and threw
// std::length_error.
TEST(ModelConfig, ALayerCountOutOfRangeIsRefusedBeforeAnyListIsSized) {
  json j = tiny_next();
  j["mlp_only_layers"] = {2};
  for (int64_t layers : {int64_t{-5}, int64_t{0}, int64_t{1} << 40}) {
    j["num_hidden_layers"] = layers;
    EXPECT_THAT(error_of(j), HasSubstr("num_hidden_layers must be in 1..4096, got " + std::to_string(layers)));
  }
}

TEST(ModelConfig, MultimodalWrapperReadsTextConfig) {
  json text = tiny_next();
  text["model_type"] = "qwen3_5_moe_text";
  text.erase("intermediate_size");
  const json wrapper = {{"model_type", "qwen3_5_moe"},
                        {"text_config", text},
                        {"vision_config", {{"depth", 2}}},
                        {"tie_word_embeddings", true}};
  const ModelConfig c = parse_model_config(wrapper.dump(), "config.json");
  EXPECT_EQ(c.family, ModelFamily::kQwen35Moe);
  EXPECT_EQ(c.tensor_prefix, "model.language_model.");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.norm_topk_prob);  // Qwen3.5-MoE always renormalizes
  EXPECT_EQ(c.hidden_size, 32);
}

TEST(ModelConfig, Qwen35DenseHasNoExperts) {
  json j = tiny_next();
  j["model_type"] = "qwen3_5_text";
  const ModelConfig c = parse_model_config(j.dump(), "config.json");
  EXPECT_EQ(c.family, ModelFamily::kQwen35Dense);
  for (MlpKind k : c.mlp_kinds) EXPECT_EQ(k, MlpKind::kDense);
}

TEST(ModelConfig, Fp8QuantizationConfig) {
  json j = tiny_next();
  j["quantization_config"] = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 64}}};
  const ModelConfig c = parse_model_config(j.dump(), "config.json");
  ASSERT_TRUE(c.fp8.has_value());
  EXPECT_EQ(c.fp8->block_rows, 128);
  EXPECT_EQ(c.fp8->block_cols, 64);
  j["quantization_config"]["quant_method"] = "gptq";
  EXPECT_THAT(error_of(j), HasSubstr("quant_method 'gptq' is not supported"));
}

TEST(ModelConfig, BadFieldsNameTheFieldAndFile) {
  json j = tiny_next();
  j["model_type"] = "llama";
  EXPECT_THAT(error_of(j), HasSubstr("dir/config.json: model_type 'llama' is not supported"));
  j = tiny_next();
  j["hidden_size"] = "big";
  EXPECT_THAT(error_of(j), HasSubstr("field 'hidden_size' must be an integer"));
  j = tiny_next();
  j["linear_num_value_heads"] = 3;
  EXPECT_THAT(error_of(j), HasSubstr("linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2"));
  j = tiny_next();
  j["num_experts_per_tok"] = 9;
  EXPECT_THAT(error_of(j), HasSubstr("num_experts_per_tok 9"));
  j = tiny_next();
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(error_of(j), HasSubstr("rope_type 'yarn' is not supported"));
  j = tiny_next();
  j.erase("model_type");
  EXPECT_THAT(error_of(j), HasSubstr("missing field 'model_type'"));
  EXPECT_THAT(error_of(json::array()), HasSubstr("expected a JSON object"));
  // A syntax error, and a number past a double's range (nlohmann's out_of_range 406, which checkpoint_fuzz found
  // escaping as an uncaught exception): both one plumb::Error naming the file.
  for (const char* text : {"{\"model_type\": ", "{\"hidden_size\": 2E88056}"}) {
    try {
      parse_model_config(text, "dir/config.json");
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("dir/config.json: not valid JSON")) << text;
    }
  }
}

}  // namespace
}  // namespace plumb
