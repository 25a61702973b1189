// NVIDIA ModelOpt NVFP4 checkpoints: a folder whose projections are packed E2M1 with E4M3 group scales and an F32
// weight scale loads as the model whose weights are their dequantized values, to the bit; a folder that gets the
// format wrong is refused, naming the tensor or field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <regex>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/generate.h"
#include "loader/load_model.h"
#include "support/fixtures.h"
#include "support/load_error.h"
#include "support/synthetic_model.h"

namespace plumb {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kGroup = 16;

// The projections ModelOpt quantizes in these models (the router and the shared expert's gate stay unquantized).
bool is_quantizable(const std::string& name) {
  static const std::regex pattern(
      R"(.*\.(self_attn\.(q|k|v|o)_proj|linear_attn\.(in_proj_qkvz|in_proj_ba|out_proj)|mlp\.experts\.\d+\.(gate|up|down)_proj|mlp\.shared_expert\.(gate|up|down)_proj)\.weight)");
  return std::regex_match(name, pattern);
}

test::NamedTensor f32_tensor(const std::string& name, Shape shape, const std::vector<float>& values) {
  return test::make_tensor(name, DType::kF32, std::move(shape), values);
}

// E2M1 by its definition: sign bit 3, magnitude e = bits 1-2, m = bit 0; e = 0 is subnormal (m · 0.5), otherwise
// 2^(e - 1) · (1 + m / 2).
float e2m1_value(unsigned code) {
  const unsigned e = (code >> 1) & 3u, m = code & 1u;
  const float magnitude =
      e == 0 ? 0.5f * static_cast<float>(m) : std::ldexp(1.0f + 0.5f * static_cast<float>(m), e - 1);
  return (code & 8u) != 0 ? -magnitude : magnitude;
}

// A random NVFP4 weight of `shape` [N, K]: its packed codes, group scales (E4M3 of 2^-6 .. 2^3), weight scale and an
// activation scale, and the F32 values they stand for.
struct Nvfp4Weight {
  std::vector<test::NamedTensor> tensors;  // weight, weight_scale, weight_scale_2, input_scale
  std::vector<float> dequantized;          // [N, K]
};
Nvfp4Weight random_nvfp4(const std::string& weight_name, const Shape& shape, std::mt19937_64& rng) {
  const int64_t n = shape[0], k = shape[1], groups = k / kGroup;
  const std::string module = weight_name.substr(0, weight_name.size() - std::string(".weight").size());
  std::uniform_int_distribution<int> byte(0, 255), scale_code(0x08, 0x5f);  // positive normal E4M3 codes
  Nvfp4Weight w;
  test::NamedTensor packed{weight_name, DType::kU8, {n, k / 2}, {}};
  test::NamedTensor scale{module + ".weight_scale", DType::kF8E4M3, {n, groups}, {}};
  for (int64_t i = 0; i < n * k / 2; ++i) packed.bytes.push_back(static_cast<unsigned char>(byte(rng)));
  for (int64_t i = 0; i < n * groups; ++i) scale.bytes.push_back(static_cast<unsigned char>(scale_code(rng)));
  const float scale_2 = std::uniform_real_distribution<float>(0.001f, 0.1f)(rng);
  w.dequantized.resize(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const unsigned byte_value = packed.bytes[static_cast<size_t>(r * k / 2 + c / 2)];
      const unsigned code = c % 2 == 0 ? byte_value & 0xfu : byte_value >> 4;
      const float group_scale = fp8_e4m3_to_f32(scale.bytes[static_cast<size_t>(r * groups + c / kGroup)]);
      w.dequantized[static_cast<size_t>(r * k + c)] = e2m1_value(code) * group_scale * scale_2;
    }
  }
  w.tensors = {std::move(packed), std::move(scale), f32_tensor(module + ".weight_scale_2", {}, {scale_2}),
               f32_tensor(module + ".input_scale", {}, {0.02f})};
  return w;
}

nlohmann::json hf_quant_config(const nlohmann::json& exclude) {
  return {
      {"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}},
      {"quantization",
       {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16}, {"exclude_modules", exclude}}}};
}

class Nvfp4 : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = test::scratch_dir(name + "_nvfp4");
    twin_dir_ = test::scratch_dir(name + "_dequantized");
    // Wide enough that every projection's K is whole groups of 16.
    config_ = test::small_qwen3_next_config();
    config_["hidden_size"] = 32;
    config_["moe_intermediate_size"] = 16;
    config_["shared_expert_intermediate_size"] = 16;
    std::mt19937_64 rng(77);
    for (test::NamedTensor& t : test::synthetic_tensors(config_, 9)) {
      if (!is_quantizable(t.name) || t.shape[1] % kGroup != 0 || t.name.find(".layers.1.") != std::string::npos) {
        // Layer 1 stays unquantized, as exclude_modules says below.
        nvfp4_.push_back(t);
        twin_.push_back(t);
        continue;
      }
      Nvfp4Weight w = random_nvfp4(t.name, t.shape, rng);
      twin_.push_back(f32_tensor(t.name, t.shape, w.dequantized));
      for (test::NamedTensor& q : w.tensors) nvfp4_.push_back(std::move(q));
      ++quantized_;
    }
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    std::filesystem::remove_all(twin_dir_);
  }

  void write_nvfp4_folder() {
    test::write_model_folder(dir_, config_, nvfp4_);
    std::ofstream(dir_ + "/hf_quant_config.json") << quant_config_.dump(2);
  }
  // The message of the error loading the NVFP4 folder raises ("(loaded)" if it loads).
  std::string load_error() {
    write_nvfp4_folder();
    return test::load_error_of(dir_);
  }
  test::NamedTensor& tensor(const std::string& name) {
    for (auto& t : nvfp4_)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }

  std::string dir_, twin_dir_;
  nlohmann::json config_;
  nlohmann::json quant_config_ = hf_quant_config({"lm_head", "model.layers.1.*", "model.layers.*.mlp.gate"});
  std::vector<test::NamedTensor> nvfp4_, twin_;
  int quantized_ = 0;
};

// The logits of a prompt through the model in `dir`.
std::vector<float> prompt_logits(const std::string& dir) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(dir, backend);
  SequenceState state = model.new_sequence();
  const Tensor logits = model.forward(state, {3, 1, 4, 1, 5, 9, 2, 6}, LogitsRows::kAll);
  return std::vector<float>(logits.f32(), logits.f32() + logits.numel());
}

TEST_F(Nvfp4, LoadsAsItsDequantizedWeightsToTheBit) {
  ASSERT_GE(quantized_, 20);  // attention, both GDN layers' projections and every expert of layers 0 and 2
  write_nvfp4_folder();
  test::write_model_folder(twin_dir_, config_, twin_);
  const std::vector<float> got = prompt_logits(dir_), want = prompt_logits(twin_dir_);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST_F(Nvfp4, KeepsItsWeightsInTheirOwnBytes) {
  write_nvfp4_folder();
  CpuBackend backend;
  const LoadedModel m = load_model(dir_, backend);
  const Tensor& o_proj = m.weights.layers[2].attn.o_proj;  // [32, nq·d], quantized
  ASSERT_EQ(o_proj.dtype(), DType::kE2M1);
  ASSERT_NE(o_proj.group_scales(), nullptr);
  ASSERT_NE(o_proj.block_scales(), nullptr);
  const int64_t n = o_proj.dim(0), k = o_proj.dim(1);
  // Half a byte a weight, a byte of scale per 16 and four bytes a row: no widening on the host.
  EXPECT_EQ(o_proj.bytes_with_scales(), static_cast<size_t>(n * k / 2 + n * k / 16 + 4 * n));
  // The codes are the checkpoint's bytes, in place.
  const test::NamedTensor& stored = tensor("model.layers.2.self_attn.o_proj.weight");
  EXPECT_EQ(std::memcmp(o_proj.data(), stored.bytes.data(), stored.bytes.size()), 0);
  // Layer 1, left unquantized by exclude_modules, keeps its checkpoint's dtype.
  const LayerWeights& unquantized = m.weights.layers[1];
  EXPECT_EQ(unquantized.kind == LayerKind::kGatedDeltaNet ? unquantized.gdn.out_proj.dtype()
                                                          : unquantized.attn.o_proj.dtype(),
            DType::kF32);
}

TEST_F(Nvfp4, ReadsTheQuantizationFromConfigJsonToo) {
  // ModelOpt's newer export: config.json's quantization_config, the group size under config_groups.
  config_["quantization_config"] = {
      {"quant_method", "modelopt"},
      {"quant_algo", "NVFP4"},
      {"ignore", {"lm_head", "model.layers.1.*", "model.layers.*.mlp.gate"}},
      {"config_groups", {{"group_0", {{"weights", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}}}}}}};
  test::write_model_folder(dir_, config_, nvfp4_);
  nlohmann::json plain = config_;
  plain.erase("quantization_config");
  test::write_model_folder(twin_dir_, plain, twin_);
  const std::vector<float> got = prompt_logits(dir_), want = prompt_logits(twin_dir_);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST_F(Nvfp4, RefusesPackedWeightsWithoutAQuantizationConfig) {
  test::write_model_folder(dir_, config_, nvfp4_);
  CpuBackend backend;
  EXPECT_THAT([&] { open_model(dir_, backend); },
              ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("is U8"), HasSubstr("declares no NVFP4"))));
}

TEST_F(Nvfp4, RefusesAMissingScale) {
  const std::string scale = "model.layers.0.mlp.experts.0.gate_proj.weight_scale";
  std::erase_if(nvfp4_, [&](const test::NamedTensor& t) { return t.name == scale; });
  EXPECT_THAT(load_error(), HasSubstr("has no '" + scale + "'"));
}

TEST_F(Nvfp4, RefusesAScaleOfTheWrongShape) {
  test::NamedTensor& scale = tensor("model.layers.2.self_attn.o_proj.weight_scale");
  scale.shape = {scale.shape[1], scale.shape[0]};
  EXPECT_THAT(load_error(), AllOf(HasSubstr("o_proj.weight"), HasSubstr("weight_scale has shape")));
}

TEST_F(Nvfp4, RefusesANonFiniteScale) {
  test::NamedTensor& scale_2 = tensor("model.layers.0.mlp.experts.1.up_proj.weight_scale_2");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(scale_2.bytes.data(), &nan, 4);
  EXPECT_THAT(load_error(), AllOf(HasSubstr("experts.1.up_proj.weight"), HasSubstr("weight_scale_2 is nan")));
  scale_2 = f32_tensor(scale_2.name, {}, {0.5f});
  // down_proj [32, 16]: one group a row, so byte 3 is row 3's scale.
  tensor("model.layers.0.mlp.experts.2.down_proj.weight_scale").bytes[3] = 0x7f;  // E4M3's NaN
  EXPECT_THAT(load_error(), AllOf(HasSubstr("experts.2.down_proj.weight"), HasSubstr("weight_scale[3, 0] is nan")));
}

TEST_F(Nvfp4, RefusesAnExcludedModuleStoredPacked) {
  quant_config_ = hf_quant_config({"lm_head", "model.layers.1.*", "model.layers.*.mlp.gate", "*.self_attn.o_proj"});
  EXPECT_THAT(load_error(), AllOf(HasSubstr("model.layers.2.self_attn.o_proj"), HasSubstr("exclude_modules")));
}

TEST_F(Nvfp4, MatchesExclusionsByGlobInTimeLinearInTheirLength) {
  // Neither pattern names a quantized module; the second would take exponential time to a recursive matcher.
  quant_config_ = hf_quant_config({"model.layers.1.*", "*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*Z"});
  EXPECT_EQ(load_error(), "(loaded)");
  quant_config_ = hf_quant_config({"*.experts.*_proj"});
  EXPECT_THAT(load_error(),
              AllOf(HasSubstr("model.layers.0.mlp.experts.0.gate_proj"), HasSubstr("'*.experts.*_proj'")));
}

TEST_F(Nvfp4, RefusesOtherAlgorithmsAndGroupSizes) {
  quant_config_["quantization"]["quant_algo"] = "W4A8_AWQ";
  EXPECT_THAT(load_error(),
              AllOf(HasSubstr("hf_quant_config.json"), HasSubstr("quant_algo 'W4A8_AWQ' is not supported")));
  quant_config_["quantization"]["quant_algo"] = "NVFP4";
  quant_config_["quantization"]["group_size"] = 32;
  EXPECT_THAT(load_error(), HasSubstr("group_size 32 does not match NVFP4's groups of 16"));
  quant_config_["quantization"]["group_size"] = 16;
  quant_config_["quantization"]["kv_cache_quant_algo"] = "NVFP4";
  EXPECT_THAT(load_error(), HasSubstr("kv_cache_quant_algo 'NVFP4' is not supported"));
}

// NVIDIA's NVFP4 builds declare an FP8 KV cache and carry its calibrated scales beside k_proj and v_proj. plumb keeps
// the cache in BF16: the folder loads as the same model, and the scales are checked, not applied.
class Nvfp4KvScales : public Nvfp4 {
 protected:
  void SetUp() override {
    Nvfp4::SetUp();
    quant_config_["quantization"]["kv_cache_quant_algo"] = "FP8";
    for (const test::NamedTensor& t : twin_) {
      const std::string suffix = ".self_attn.k_proj.weight";
      if (!t.name.ends_with(suffix)) continue;
      const std::string attn = t.name.substr(0, t.name.size() - suffix.size()) + ".self_attn";
      scales_.push_back(f32_tensor(attn + ".k_proj.k_scale", {}, {0.031f}));
      scales_.push_back(f32_tensor(attn + ".v_proj.v_scale", {}, {0.027f}));
    }
  }
  std::string load_error_with_scales() {
    nvfp4_.insert(nvfp4_.end(), scales_.begin(), scales_.end());
    return load_error();
  }
  std::vector<test::NamedTensor> scales_;
};

TEST_F(Nvfp4KvScales, LoadAsTheModelWithoutThem) {
  ASSERT_GE(scales_.size(), 2u);
  EXPECT_EQ(load_error_with_scales(), "(loaded)");
  test::write_model_folder(twin_dir_, config_, twin_);
  const std::vector<float> got = prompt_logits(dir_), want = prompt_logits(twin_dir_);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST_F(Nvfp4KvScales, AreDeclaredByAKvCacheSchemeToo) {
  quant_config_["quantization"].erase("kv_cache_quant_algo");
  quant_config_["quantization"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"dynamic", false}};
  EXPECT_EQ(load_error_with_scales(), "(loaded)");
  quant_config_["quantization"]["kv_cache_scheme"]["num_bits"] = 4;
  EXPECT_THAT(load_error(), HasSubstr("kv_cache_scheme: only an 8-bit float KV cache is understood"));
}

TEST_F(Nvfp4KvScales, AreRefusedWhenUndeclaredMisshapenOrNotPositive) {
  const std::string name = scales_[0].name;
  quant_config_["quantization"]["kv_cache_quant_algo"] = nullptr;
  EXPECT_THAT(load_error_with_scales(), HasSubstr("unexpected tensor '" + name + "'"));
  quant_config_["quantization"]["kv_cache_quant_algo"] = "FP8";
  tensor(name) = f32_tensor(name, {2}, {0.5f, 0.5f});
  EXPECT_THAT(load_error(), AllOf(HasSubstr("KV-cache scale '" + name + "'"), HasSubstr("expected one F32 value")));
  tensor(name) = f32_tensor(name, {}, {std::numeric_limits<float>::quiet_NaN()});
  EXPECT_THAT(load_error(), AllOf(HasSubstr("KV-cache scale '" + name + "'"), HasSubstr("expected a positive number")));
  tensor(name) = f32_tensor(name, {}, {0.0f});
  EXPECT_THAT(load_error(), HasSubstr("expected a positive number"));
}

}  // namespace
}  // namespace plumb
