// Gated DeltaNet on the CPU: the chunked prefill against the token-by-token recurrence, the conv state across calls,
// and the recurrence against a plain double-precision transcription of the spec.
#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "support/random.h"

namespace plumb {
namespace {

struct GdnInputs {
  Tensor q, k, v, g, beta, state;
};

// Gates drawn the way the model produces them: g = -exp(A) softplus(.) ≤ 0, beta = sigmoid(.).
GdnInputs random_gdn_inputs(std::mt19937_64& rng, int64_t T, int64_t nk, int64_t nv, int64_t dk, int64_t dv) {
  GdnInputs in{test::random_tensor(rng, {T, nk, dk}), test::random_tensor(rng, {T, nk, dk}),
               test::random_tensor(rng, {T, nv, dv}), test::random_tensor(rng, {T, nv}),
               test::random_tensor(rng, {T, nv}),     test::random_tensor(rng, {nv, dk, dv}, 0.5f)};
  for (int64_t i = 0; i < T * nv; ++i) {
    in.g.f32()[i] = -std::exp(0.3f * in.g.f32()[i]) * cpu::softplus(in.beta.f32()[i]);
    in.beta.f32()[i] = cpu::sigmoid(2.0f * in.beta.f32()[(i * 7) % (T * nv)]);
  }
  return in;
}

Tensor clone(const Tensor& t) {
  Tensor c = Tensor::zeros(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

class GdnShapes : public ::testing::TestWithParam<int64_t> {};

TEST_P(GdnShapes, ChunkedMatchesRecurrent) {
  const int64_t T = GetParam(), nk = 2, nv = 6, dk = 16, dv = 24;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CpuBackend be;
  GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  Tensor state_rec = clone(in.state), state_chunk = clone(in.state);
  Tensor o_rec = Tensor::zeros(DType::kF32, {T, nv, dv}), o_chunk = Tensor::zeros(DType::kF32, {T, nv, dv});
  be.gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, state_rec, o_rec, GdnAlgorithm::kRecurrent);
  be.gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, state_chunk, o_chunk, GdnAlgorithm::kChunked);
  // Both are FP32 evaluations of one function with |S| = O(1): the spec's §10.5 expects agreement to about 1e-5;
  // 2e-5 leaves room for the chunk's longer accumulation chains (64 terms per entry).
  EXPECT_TRUE(test::max_abs_diff(o_rec, o_chunk) <= 2e-5f) << test::max_abs_diff(o_rec, o_chunk);
  EXPECT_TRUE(test::max_abs_diff(state_rec, state_chunk) <= 2e-5f) << test::max_abs_diff(state_rec, state_chunk);
}

INSTANTIATE_TEST_SUITE_P(Lengths, GdnShapes, ::testing::Values(1, 2, 63, 64, 65, 130, 200));

// The recurrence in double precision, written straight from the spec (§3 step 9) for one value head.
TEST(GatedDeltaRule, RecurrentMatchesDoublePrecisionTranscription) {
  const int64_t T = 9, nk = 1, nv = 2, dk = 5, dv = 3;
  std::mt19937_64 rng(7);
  CpuBackend be;
  GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  Tensor state = clone(in.state), o = Tensor::zeros(DType::kF32, {T, nv, dv});
  be.gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, state, o, GdnAlgorithm::kRecurrent);
  for (int64_t h = 0; h < nv; ++h) {
    std::vector<double> S(dk * dv);
    for (int64_t i = 0; i < dk * dv; ++i) S[i] = in.state.f32()[h * dk * dv + i];
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> q(dk), k(dk);
      double qn = 0, kn = 0;
      for (int64_t i = 0; i < dk; ++i) {
        q[i] = in.q.f32()[t * dk + i];
        k[i] = in.k.f32()[t * dk + i];
        qn += q[i] * q[i];
        kn += k[i] * k[i];
      }
      for (int64_t i = 0; i < dk; ++i) {
        q[i] /= std::sqrt(qn + 1e-6) * std::sqrt(static_cast<double>(dk));
        k[i] /= std::sqrt(kn + 1e-6);
      }
      const double alpha = std::exp(static_cast<double>(in.g.f32()[t * nv + h]));
      const double b = in.beta.f32()[t * nv + h];
      for (double& s : S) s *= alpha;
      for (int64_t j = 0; j < dv; ++j) {
        double m = 0;
        for (int64_t i = 0; i < dk; ++i) m += S[i * dv + j] * k[i];
        const double delta = b * (in.v.f32()[(t * nv + h) * dv + j] - m);
        for (int64_t i = 0; i < dk; ++i) S[i * dv + j] += k[i] * delta;
      }
      for (int64_t j = 0; j < dv; ++j) {
        double out = 0;
        for (int64_t i = 0; i < dk; ++i) out += S[i * dv + j] * q[i];
        const float got = o.f32()[(t * nv + h) * dv + j];
        EXPECT_TRUE(std::fabs(got - out) <= 1e-5)
            << "t " << t << " h " << h << " j " << j << ": " << got << " vs " << out;
      }
    }
  }
}

// Splitting a sequence across calls (state carried over) gives what one call gives, for both algorithms.
TEST(GatedDeltaRule, StateCarriesAcrossCalls) {
  const int64_t T = 150, split = 70, nk = 2, nv = 4, dk = 8, dv = 8;
  std::mt19937_64 rng(11);
  CpuBackend be;
  GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  for (GdnAlgorithm algorithm : {GdnAlgorithm::kRecurrent, GdnAlgorithm::kChunked}) {
    Tensor whole_state = clone(in.state), o_whole = Tensor::zeros(DType::kF32, {T, nv, dv});
    be.gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, whole_state, o_whole, algorithm);
    Tensor state = clone(in.state), o_parts = Tensor::zeros(DType::kF32, {T, nv, dv});
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, split}, {split, T}}) {
      Tensor o = o_parts.rows(begin, end);
      be.gated_delta_rule(in.q.rows(begin, end), in.k.rows(begin, end), in.v.rows(begin, end), in.g.rows(begin, end),
                          in.beta.rows(begin, end), state, o, algorithm);
    }
    EXPECT_TRUE(test::max_abs_diff(o_whole, o_parts) <= 2e-5f);
    EXPECT_TRUE(test::max_abs_diff(whole_state, state) <= 2e-5f);
  }
}

TEST(CausalConv1d, StateCarriesAcrossCalls) {
  const int64_t T = 11, C = 5, K = 4;
  std::mt19937_64 rng(3);
  CpuBackend be;
  const Tensor x = test::random_tensor(rng, {T, C}), w = test::random_tensor(rng, {C, K});
  Tensor state_whole = Tensor::zeros(DType::kF32, {C, K - 1}), y_whole = Tensor::zeros(DType::kF32, {T, C});
  be.causal_conv1d_silu(x, w, state_whole, y_whole);
  Tensor state = Tensor::zeros(DType::kF32, {C, K - 1}), y = Tensor::zeros(DType::kF32, {T, C});
  for (int64_t t = 0; t < T; t += (t < 2 ? 1 : 4)) {
    const int64_t end = std::min(T, t + (t < 2 ? 1 : 4));
    Tensor part = y.rows(t, end);
    be.causal_conv1d_silu(x.rows(t, end), w, state, part);
  }
  EXPECT_EQ(test::max_abs_diff(y_whole, y), 0.0f);
  EXPECT_EQ(test::max_abs_diff(state_whole, state), 0.0f);
  // The first output sees only the current input (zero history): SiLU(w[c, K-1] x[0, c]).
  for (int64_t c = 0; c < C; ++c) EXPECT_FLOAT_EQ(y_whole.f32()[c], cpu::silu(w.f32()[c * K + K - 1] * x.f32()[c]));
}

}  // namespace
}  // namespace plumb
