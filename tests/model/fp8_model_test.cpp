// Fine-grained FP8 checkpoints (E4M3 codes with a weight_scale_inv per block): where the blocks follow the products'
// 128-wide K-slices the loader keeps the codes, with a multiplier per row and slice beside them, on every backend; a
// folder loads as the model whose weights are its dequantized values, to the bit, through every rearrangement the
// loader makes (Qwen3-Next's qkvz and ba permutations, the projection stacks, per-expert tensors stacked into one).
// Other blocks are expanded to F32 as they load, with the same result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>

#include "backends/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "support/fixtures.h"
#include "support/synthetic_model.h"

namespace plumb {
namespace {

// The projections the published FP8 checkpoints quantize (routers, the shared expert's gate and in_proj_ba stay).
bool is_quantized(const std::string& name) {
  static const std::regex pattern(
      R"(.*\.(self_attn\.(q|k|v|o)_proj|linear_attn\.(in_proj_qkvz|out_proj)|mlp\.experts\.\d+\.(gate|up|down)_proj|mlp\.shared_expert\.(gate|up|down)_proj)\.weight)");
  return std::regex_match(name, pattern);
}

// The folder and its dequantized twin for blocks of [block_rows, block_cols].
struct Folders {
  std::string fp8, twin;
  int quantized = 0;
};

Folders write_folders(const std::string& name, int64_t block_rows, int64_t block_cols) {
  nlohmann::json config = test::small_qwen3_next_config();
  // K = 160 and 136: two K-slices, the second short, and rows past one 128-row block.
  config["hidden_size"] = 160;
  config["moe_intermediate_size"] = 136;
  config["shared_expert_intermediate_size"] = 136;
  nlohmann::json quantized_config = config;
  quantized_config["quantization_config"] = {{"quant_method", "fp8"},
                                             {"fmt", "e4m3"},
                                             {"activation_scheme", "dynamic"},
                                             {"weight_block_size", {block_rows, block_cols}}};
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> code(0, 253), step(0, 15);
  Folders f{test::scratch_dir(name + "_fp8"), test::scratch_dir(name + "_dequantized")};
  std::vector<test::NamedTensor> fp8, twin;
  for (const test::NamedTensor& t : test::synthetic_tensors(config, 3)) {
    if (!is_quantized(t.name)) {
      fp8.push_back(t);
      twin.push_back(t);
      continue;
    }
    const int64_t n = t.shape[0], k = t.shape[1];
    const int64_t block_n = (n + block_rows - 1) / block_rows, block_k = (k + block_cols - 1) / block_cols;
    test::NamedTensor codes{t.name, DType::kF8E4M3, t.shape, {}};
    std::vector<float> scales(static_cast<size_t>(block_n * block_k)), values(static_cast<size_t>(n * k));
    // Multipliers that differ block to block (a wrong block's shows), each exact in F32.
    for (float& s : scales) s = std::ldexp(static_cast<float>(1 + step(rng)), -12);
    for (int64_t i = 0; i < n * k; ++i) {
      const int c = code(rng);
      const auto byte = static_cast<uint8_t>(c < 127 ? c : c + 1);  // no NaN codes
      codes.bytes.push_back(byte);
      const float s = scales[static_cast<size_t>((i / k) / block_rows * block_k + (i % k) / block_cols)];
      values[static_cast<size_t>(i)] = fp8_e4m3_to_f32(byte) * s;
    }
    const std::string module = t.name.substr(0, t.name.size() - std::string(".weight").size());
    fp8.push_back(std::move(codes));
    fp8.push_back(test::make_tensor(module + ".weight_scale_inv", DType::kF32, {block_n, block_k}, scales));
    twin.push_back(test::make_tensor(t.name, DType::kF32, t.shape, values));
    ++f.quantized;
  }
  test::write_model_folder(f.fp8, quantized_config, fp8);
  test::write_model_folder(f.twin, config, twin);
  return f;
}

// The logits of a prompt through the model in `dir`, and the dtype its first GDN layer's qkv projection has there.
struct ModelRun {
  std::vector<float> logits;
  DType qkv_dtype;
};
ModelRun run(const std::string& dir) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(dir, backend);
  SequenceState state = model.new_sequence();
  const Tensor logits = model.forward(state, {3, 1, 4, 1, 5, 9, 2, 6}, LogitsRows::kAll);
  return {std::vector<float>(logits.f32(), logits.f32() + logits.numel()),
          model.weights().layers[0].gdn.in_proj_qkv.dtype()};
}

TEST(Fp8Model, LoadsAsItsDequantizedWeightsToTheBit) {
  struct Blocks {
    int64_t rows, cols;
    DType kept_as;  // what the projections are on the backend
  };
  // [128, 128] and [64, 256]: every K-slice in one block column, the codes kept. [32, 32]: a slice spans several
  // block columns, expanded to F32.
  for (const Blocks& b :
       {Blocks{128, 128, DType::kF8E4M3}, Blocks{64, 256, DType::kF8E4M3}, Blocks{32, 32, DType::kF32}}) {
    SCOPED_TRACE(std::to_string(b.rows) + " x " + std::to_string(b.cols));
    const Folders f = write_folders("blocks_" + std::to_string(b.rows) + "_" + std::to_string(b.cols), b.rows, b.cols);
    ASSERT_GE(f.quantized, 20);  // attention, both GDN layers, every expert and the shared expert of each layer
    const ModelRun got = run(f.fp8), want = run(f.twin);
    EXPECT_EQ(got.qkv_dtype, b.kept_as);
    ASSERT_EQ(got.logits.size(), want.logits.size());
    EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * sizeof(float)), 0);
    std::filesystem::remove_all(f.fp8);
    std::filesystem::remove_all(f.twin);
  }
}

}  // namespace
}  // namespace plumb
