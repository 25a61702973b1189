// CpuRounding::kBf16Operands rounds exactly the operands the CUDA backend rounds (the activations of products with
// BF16 or FP8 weights, attention's queries, cached keys and values and its probabilities) and nothing else.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "support/random.h"
#include "support/seeded_test.h"
#include "support/tensors.h"

namespace plumb {
namespace {

class Bf16Operands : public test::SeededTest {
 protected:
  CpuBackend exact_;
  CpuBackend rounded_{CpuRounding::kBf16Operands};
};

TEST_F(Bf16Operands, LinearRoundsTheActivationOfBf16WeightsOnly) {
  SCOPED_TRACE(trace());
  const int64_t T = 5, K = 37, N = 11;
  const Tensor x = test::random_tensor(rng_, {T, K}), w32 = test::random_tensor(rng_, {N, K});
  const Tensor w16 = test::to_dtype(w32, DType::kBF16);
  Tensor got = Tensor::zeros(DType::kF32, {T, N}), want = Tensor::zeros(DType::kF32, {T, N});
  rounded_.linear(x, w16, got);
  exact_.linear(test::bf16_exact(x), w16, want);
  EXPECT_TRUE(test::same_bits(got, want));
  exact_.linear(x, w16, want);
  EXPECT_FALSE(test::same_bits(got, want));  // the rounding is not a no-op on N(0, 1) inputs
  // F32 weights: the GPU's F32 kernel keeps x as it is.
  rounded_.linear(x, w32, got);
  exact_.linear(x, w32, want);
  EXPECT_TRUE(test::same_bits(got, want));
}

// FP8 weights (codes with block scales) are read as the widened weights, w = fl(code · s): the product equals the one
// over widen_fp8_weight's F32 matrix bit for bit, and kBf16Operands rounds its activation as the GPU does (its FP8
// products run on BF16 tensor cores). K = 300 spans three K-slices with their own multipliers.
TEST_F(Bf16Operands, Fp8WeightsAreTheirWidenedValuesAndRoundTheActivation) {
  SCOPED_TRACE(trace());
  const int64_t T = 3, K = 300, N = 9;
  const Tensor x = test::random_tensor(rng_, {T, K});
  Tensor codes = Tensor::zeros(DType::kF8E4M3, {N, K});
  for (int64_t i = 0; i < N * K; ++i) codes.data_as<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 126);
  Tensor scales = Tensor::zeros(DType::kF32, Tensor::block_scales_shape({N, K}));
  for (int64_t i = 0; i < scales.numel(); ++i) scales.f32()[i] = 0.001f * static_cast<float>(1 + i % 5);
  const Tensor w8 = codes.with_block_scales(scales), w32 = widen_fp8_weight(w8);
  Tensor got = Tensor::zeros(DType::kF32, {T, N}), want = Tensor::zeros(DType::kF32, {T, N});
  exact_.linear(x, w8, got);
  exact_.linear(x, w32, want);
  EXPECT_TRUE(test::same_bits(got, want));
  rounded_.linear(x, w8, got);
  exact_.linear(test::bf16_exact(x), w32, want);
  EXPECT_TRUE(test::same_bits(got, want));
}

// Top-1 routing with weight 1: y = down(round(SiLU(gate round(x)) ⊙ up round(x))), built from the reference's linear.
TEST_F(Bf16Operands, ExpertsRoundTheirInputAndTheirActivation) {
  SCOPED_TRACE(trace());
  const int64_t T = 3, H = 19, I = 7, E = 2;
  const Tensor gate_up32 = test::random_tensor(rng_, {E, 2 * I, H}), down32 = test::random_tensor(rng_, {E, H, I});
  const ExpertWeights experts{test::to_dtype(gate_up32, DType::kBF16), test::to_dtype(down32, DType::kBF16)};
  const Tensor x = test::random_tensor(rng_, {T, H});
  Tensor ids = Tensor::zeros(DType::kI32, {T, 1}), weights = Tensor::zeros(DType::kF32, {T, 1});
  for (int64_t t = 0; t < T; ++t) {
    ids.data_as<int32_t>()[t] = static_cast<int32_t>(t % E);
    weights.f32()[t] = 1.0f;
  }
  Tensor y = Tensor::zeros(DType::kF32, {T, H});
  rounded_.moe_experts(x, ids, weights, experts, y);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t e = t % E;
    const Tensor gate_up = experts.gate_up.rows(e, e + 1).reshape({2 * I, H});
    const Tensor xt = test::bf16_exact(x.rows(t, t + 1));
    Tensor gate = Tensor::zeros(DType::kF32, {1, I}), up = Tensor::zeros(DType::kF32, {1, I});
    exact_.linear(xt, gate_up.rows(0, I), gate);
    exact_.linear(xt, gate_up.rows(I, 2 * I), up);
    Tensor act = Tensor::zeros(DType::kF32, {1, I});
    for (int64_t i = 0; i < I; ++i) act.f32()[i] = cpu::round_to_bf16(cpu::silu(gate.f32()[i]) * up.f32()[i]);
    Tensor want = Tensor::zeros(DType::kF32, {1, H});
    exact_.linear(act, experts.down.rows(e, e + 1).reshape({H, I}), want);
    EXPECT_TRUE(test::same_bits(y.rows(t, t + 1), want)) << "token " << t;
  }
}

TEST_F(Bf16Operands, AttentionCachesBf16KeysAndValues) {
  SCOPED_TRACE(trace());
  const int64_t T = 9, nq = 4, nkv = 2, d = 16;
  const Tensor q = test::random_tensor(rng_, {T, nq, d});
  const Tensor k = test::random_tensor(rng_, {T, nkv, d}), v = test::random_tensor(rng_, {T, nkv, d});
  // One page each: positions [0, T) are rows [0, T) of the pool.
  const std::vector<int32_t> page_table = {0};
  const Shape pool = {1, kKvPageSize, nkv, d};
  KvCache cache{Tensor::zeros(DType::kF32, pool), Tensor::zeros(DType::kF32, pool), page_table};
  KvCache exact_cache{Tensor::zeros(DType::kF32, pool), Tensor::zeros(DType::kF32, pool), page_table};
  Tensor o = Tensor::zeros(DType::kF32, {T, nq, d}), exact_o = Tensor::zeros(DType::kF32, {T, nq, d});
  rounded_.attention(q, k, v, {&cache}, BatchRows{SequenceRows{0, T, 0}}, o, GdnAlgorithm::kChunked);
  exact_.attention(q, k, v, {&exact_cache}, BatchRows{SequenceRows{0, T, 0}}, exact_o, GdnAlgorithm::kChunked);
  auto positions = [&](const Tensor& pool_tensor) { return pool_tensor.reshape({kKvPageSize, nkv, d}).rows(0, T); };
  EXPECT_TRUE(test::same_bits(positions(cache.k), test::bf16_exact(k)));
  EXPECT_TRUE(test::same_bits(positions(cache.v), test::bf16_exact(v)));
  const Tensor exact_keys = positions(exact_cache.k);
  EXPECT_FALSE(test::same_bits(exact_keys, test::bf16_exact(exact_keys)));
  // Outputs are averages of BF16-exact values with weights that sum to 1 within BF16 rounding: each is within a few
  // BF16 units (2^-8 relative, doubled for q and the probabilities) of the exact reference.
  const float err = test::max_abs_diff(o, exact_o);
  EXPECT_TRUE(err <= 4 * 0x1.0p-8 * 3.0f) << err;
  EXPECT_TRUE(err > 0.0f);
}

}  // namespace
}  // namespace plumb
