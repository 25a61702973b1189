// Gated DeltaNet on the CPU: the chunked prefill against the token-by-token recurrence, the state across calls, the
// recurrence against a plain double-precision transcription of the spec, chunks aligned to absolute positions, and
// batched calls bit-identical to each sequence alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "support/random.h"
#include "support/tensors.h"
#include "support/trail_check.h"

namespace plumb {
namespace {

struct GdnInputs {
  int64_t nk = 0;
  Tensor q, k, v;         // [T, nk, dk], [T, nk, dk], [T, nv, dv]: the parts of qkv, for the references
  Tensor qkv;             // [T, 2·nk·dk + nv·dv]: q | k | v per token, the conv output's column order
  Tensor a, b;            // [T, nv]: raw decay and beta inputs
  Tensor A_log, dt_bias;  // [nv]
  Tensor state;           // [nv, dk, dv]
};

// [T, Σ widths]: each row the rows of `parts` side by side.
Tensor concat_columns(const std::vector<const Tensor*>& parts) {
  const int64_t T = parts[0]->dim(0);
  int64_t width = 0;
  for (const Tensor* p : parts) width += p->numel() / T;
  Tensor out = Tensor::zeros(DType::kF32, {T, width});
  for (int64_t t = 0; t < T; ++t) {
    float* dst = out.f32() + t * width;
    for (const Tensor* p : parts) {
      const int64_t w = p->numel() / T;
      std::memcpy(dst, p->f32() + t * w, w * sizeof(float));
      dst += w;
    }
  }
  return out;
}

// Raw gates drawn the way the model produces them, so that g = -exp(A_log) softplus(a + dt_bias) ≤ 0 spans the
// decays of a trained model (|g| from about 0.1 to a few) and beta = sigmoid(b) spans (0, 1).
GdnInputs random_gdn_inputs(std::mt19937_64& rng, int64_t T, int64_t nk, int64_t nv, int64_t dk, int64_t dv) {
  GdnInputs in;
  in.nk = nk;
  in.q = test::random_tensor(rng, {T, nk, dk});
  in.k = test::random_tensor(rng, {T, nk, dk});
  in.v = test::random_tensor(rng, {T, nv, dv});
  in.qkv = concat_columns({&in.q, &in.k, &in.v});
  in.a = test::random_tensor(rng, {T, nv});
  in.b = test::random_tensor(rng, {T, nv}, 2.0f);
  in.A_log = test::random_tensor(rng, {nv}, 0.3f);
  in.dt_bias = test::random_tensor(rng, {nv}, 0.5f);
  in.state = test::random_tensor(rng, {nv, dk, dv}, 0.5f);
  return in;
}

// One sequence's call on rows [begin, end) of `in`, its state holding `past` tokens. o [end - begin, nv, dv].
void run_gdn(CpuBackend& be, const GdnInputs& in, int64_t begin, int64_t end, int64_t past, Tensor& state, Tensor& o,
             GdnAlgorithm algorithm) {
  be.gated_delta_rule(in.qkv.rows(begin, end), in.nk, in.a.rows(begin, end), in.b.rows(begin, end), in.A_log,
                      in.dt_bias, {&state}, BatchRows{SequenceRows{0, end - begin, past}}, o, algorithm);
}

class GdnShapes : public ::testing::TestWithParam<int64_t> {};

TEST_P(GdnShapes, ChunkedMatchesRecurrent) {
  const int64_t T = GetParam(), nk = 2, nv = 6, dk = 16, dv = 24;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CpuBackend be;
  GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  Tensor state_rec = test::clone(in.state), state_chunk = test::clone(in.state);
  Tensor o_rec = Tensor::zeros(DType::kF32, {T, nv, dv}), o_chunk = Tensor::zeros(DType::kF32, {T, nv, dv});
  run_gdn(be, in, 0, T, 0, state_rec, o_rec, GdnAlgorithm::kRecurrent);
  run_gdn(be, in, 0, T, 0, state_chunk, o_chunk, GdnAlgorithm::kChunked);
  // Both are FP32 evaluations of one function with |S| = O(1): the spec's §10.5 expects agreement to about 1e-5;
  // 2e-5 leaves room for the chunk's longer accumulation chains (64 terms per entry).
  EXPECT_TRUE(test::max_abs_diff(o_rec, o_chunk) <= 2e-5f) << test::max_abs_diff(o_rec, o_chunk);
  EXPECT_TRUE(test::max_abs_diff(state_rec, state_chunk) <= 2e-5f) << test::max_abs_diff(state_rec, state_chunk);
}

INSTANTIATE_TEST_SUITE_P(Lengths, GdnShapes, ::testing::Values(1, 2, 63, 64, 65, 130, 200));

// The recurrence in double precision, written straight from the spec (§3 step 9) for one value head, the gates
// derived from their raw inputs in double too.
TEST(GatedDeltaRule, RecurrentMatchesDoublePrecisionTranscription) {
  const int64_t T = 9, nk = 1, nv = 2, dk = 5, dv = 3;
  std::mt19937_64 rng(7);
  CpuBackend be;
  GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  Tensor state = test::clone(in.state), o = Tensor::zeros(DType::kF32, {T, nv, dv});
  run_gdn(be, in, 0, T, 0, state, o, GdnAlgorithm::kRecurrent);
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
      const double g = -std::exp(static_cast<double>(in.A_log.f32()[h])) *
                       std::log1p(std::exp(static_cast<double>(in.a.f32()[t * nv + h]) + in.dt_bias.f32()[h]));
      const double alpha = std::exp(g);
      const double b = 1.0 / (1.0 + std::exp(-static_cast<double>(in.b.f32()[t * nv + h])));
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

// Value head h reads key head h / (nv / nk): with nk = 2, nv = 4, heads 0, 1 read key head 0 and heads 2, 3 key
// head 1. Checked by making the key heads' q and k differ and comparing against calls with one key head.
TEST(GatedDeltaRule, ValueHeadsReadTheirKeyHead) {
  const int64_t T = 5, nk = 2, nv = 4, dk = 8, dv = 4, group = nv / nk;
  std::mt19937_64 rng(21);
  CpuBackend be;
  GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  Tensor state = test::clone(in.state), o = Tensor::zeros(DType::kF32, {T, nv, dv});
  run_gdn(be, in, 0, T, 0, state, o, GdnAlgorithm::kRecurrent);
  for (int64_t kh = 0; kh < nk; ++kh) {
    // Key head kh alone, with its value heads [kh·group, (kh + 1)·group).
    GdnInputs one;
    one.nk = 1;
    one.q = Tensor::zeros(DType::kF32, {T, 1, dk});
    one.k = Tensor::zeros(DType::kF32, {T, 1, dk});
    one.v = Tensor::zeros(DType::kF32, {T, group, dv});
    one.a = Tensor::zeros(DType::kF32, {T, group});
    one.b = Tensor::zeros(DType::kF32, {T, group});
    one.A_log = Tensor::from_f32({in.A_log.f32() + kh * group, in.A_log.f32() + (kh + 1) * group}, {group});
    one.dt_bias = Tensor::from_f32({in.dt_bias.f32() + kh * group, in.dt_bias.f32() + (kh + 1) * group}, {group});
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(one.q.f32() + t * dk, in.q.f32() + (t * nk + kh) * dk, dk * sizeof(float));
      std::memcpy(one.k.f32() + t * dk, in.k.f32() + (t * nk + kh) * dk, dk * sizeof(float));
      std::memcpy(one.v.f32() + t * group * dv, in.v.f32() + (t * nv + kh * group) * dv, group * dv * sizeof(float));
      std::memcpy(one.a.f32() + t * group, in.a.f32() + t * nv + kh * group, group * sizeof(float));
      std::memcpy(one.b.f32() + t * group, in.b.f32() + t * nv + kh * group, group * sizeof(float));
    }
    one.qkv = concat_columns({&one.q, &one.k, &one.v});
    Tensor one_state = Tensor::zeros(DType::kF32, {group, dk, dv});
    std::memcpy(one_state.data(), in.state.f32() + kh * group * dk * dv, one_state.nbytes());
    Tensor one_o = Tensor::zeros(DType::kF32, {T, group, dv});
    run_gdn(be, one, 0, T, 0, one_state, one_o, GdnAlgorithm::kRecurrent);
    for (int64_t t = 0; t < T; ++t)
      EXPECT_EQ(
          std::memcmp(one_o.f32() + t * group * dv, o.f32() + (t * nv + kh * group) * dv, group * dv * sizeof(float)),
          0)
          << "key head " << kh << ", token " << t;
  }
}

// Splitting a sequence across calls (state carried over) gives what one call gives, for both algorithms. The split
// at 70 leaves the chunked second call a partial first chunk (positions 70 to 128).
TEST(GatedDeltaRule, StateCarriesAcrossCalls) {
  const int64_t T = 150, split = 70, nk = 2, nv = 4, dk = 8, dv = 8;
  std::mt19937_64 rng(11);
  CpuBackend be;
  GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  for (GdnAlgorithm algorithm : {GdnAlgorithm::kRecurrent, GdnAlgorithm::kChunked}) {
    Tensor whole_state = test::clone(in.state), o_whole = Tensor::zeros(DType::kF32, {T, nv, dv});
    run_gdn(be, in, 0, T, 0, whole_state, o_whole, algorithm);
    Tensor state = test::clone(in.state), o_parts = Tensor::zeros(DType::kF32, {T, nv, dv});
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, split}, {split, T}}) {
      Tensor o = o_parts.rows(begin, end);
      run_gdn(be, in, begin, end, begin, state, o, algorithm);
    }
    EXPECT_TRUE(test::max_abs_diff(o_whole, o_parts) <= 2e-5f);
    EXPECT_TRUE(test::max_abs_diff(whole_state, state) <= 2e-5f);
  }
}

// A sequence that already holds 100 tokens starts its chunked call mid-chunk: a first chunk of 28 tokens (positions
// 100 to 128), then whole chunks, then a partial last one. It still computes the recurrence.
TEST(GatedDeltaRule, ChunkedFromAPartialFirstChunkMatchesRecurrent) {
  const int64_t past = 100, nk = 2, nv = 6, dk = 16, dv = 24;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CpuBackend be;
  for (int64_t T : {2, 28, 29, 100, 157}) {
    GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
    Tensor state_rec = test::clone(in.state), state_chunk = test::clone(in.state);
    Tensor o_rec = Tensor::zeros(DType::kF32, {T, nv, dv}), o_chunk = Tensor::zeros(DType::kF32, {T, nv, dv});
    run_gdn(be, in, 0, T, past, state_rec, o_rec, GdnAlgorithm::kRecurrent);
    run_gdn(be, in, 0, T, past, state_chunk, o_chunk, GdnAlgorithm::kChunked);
    // The tolerance of ChunkedMatchesRecurrent.
    EXPECT_TRUE(test::max_abs_diff(o_rec, o_chunk) <= 2e-5f) << "T " << T << ": " << test::max_abs_diff(o_rec, o_chunk);
    EXPECT_TRUE(test::max_abs_diff(state_rec, state_chunk) <= 2e-5f)
        << "T " << T << ": " << test::max_abs_diff(state_rec, state_chunk);
  }
}

// Chunks start at multiples of 64 of the sequence's position, so a chunked call split at such a position computes
// exactly the chunks of one call: output and state bit for bit.
struct AlignedSplit {
  int64_t past, tokens;
  std::vector<int64_t> splits;  // call boundaries, relative to the first new token
};

void PrintTo(const AlignedSplit& p, std::ostream* os) {
  *os << p.tokens << " tokens after " << p.past << ", split at";
  for (int64_t at : p.splits) *os << " " << at;
}

class GdnAlignedSplits : public ::testing::TestWithParam<AlignedSplit> {};

TEST_P(GdnAlignedSplits, ChunkedSplitAtChunkBoundariesIsBitIdentical) {
  const AlignedSplit& p = GetParam();
  const int64_t T = p.tokens, nk = 2, nv = 4, dk = 16, dv = 8;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CpuBackend be;
  GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  Tensor whole_state = test::clone(in.state), o_whole = Tensor::zeros(DType::kF32, {T, nv, dv});
  run_gdn(be, in, 0, T, p.past, whole_state, o_whole, GdnAlgorithm::kChunked);
  Tensor state = test::clone(in.state), o_parts = Tensor::zeros(DType::kF32, {T, nv, dv});
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), p.splits.begin(), p.splits.end());
  bounds.push_back(T);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    Tensor o = o_parts.rows(bounds[i], bounds[i + 1]);
    run_gdn(be, in, bounds[i], bounds[i + 1], p.past + bounds[i], state, o, GdnAlgorithm::kChunked);
  }
  EXPECT_TRUE(test::same_bits(o_whole, o_parts)) << test::max_abs_diff(o_whole, o_parts);
  EXPECT_TRUE(test::same_bits(whole_state, state)) << test::max_abs_diff(whole_state, state);
}

INSTANTIATE_TEST_SUITE_P(Splits, GdnAlignedSplits,
                         ::testing::Values(AlignedSplit{0, 192, {64}}, AlignedSplit{0, 192, {128}},
                                           AlignedSplit{0, 192, {64, 128}},
                                           // From position 100: splits at positions 128 and 192.
                                           AlignedSplit{100, 156, {28}}, AlignedSplit{100, 156, {28, 92}}),
                         [](const ::testing::TestParamInfo<AlignedSplit>& info) {
                           std::string name = "past" + std::to_string(info.param.past) + "_split";
                           for (int64_t at : info.param.splits) name += "_" + std::to_string(at);
                           return name;
                         });

// Three sequences of ragged lengths, each with history, in one call: each one's output rows and state are
// bit-identical to calling it alone. The one-token sequence takes the recurrent step under either algorithm.
const BatchRows kRaggedBatch = {{0, 70, 100}, {70, 1, 7}, {71, 37, 64}};

TEST(GatedDeltaRule, BatchedCallIsBitIdenticalToEachSequenceAlone) {
  const int64_t T = 108, nk = 2, nv = 4, dk = 16, dv = 8;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CpuBackend be;
  const GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  std::vector<Tensor> initial;
  for (size_t s = 0; s < kRaggedBatch.size(); ++s) initial.push_back(test::random_tensor(rng, {nv, dk, dv}, 0.5f));
  for (GdnAlgorithm algorithm : {GdnAlgorithm::kRecurrent, GdnAlgorithm::kChunked}) {
    std::vector<Tensor> batched_states;
    for (const Tensor& s : initial) batched_states.push_back(test::clone(s));
    std::vector<Tensor*> states;
    for (Tensor& s : batched_states) states.push_back(&s);
    Tensor o = Tensor::zeros(DType::kF32, {T, nv, dv});
    be.gated_delta_rule(in.qkv, nk, in.a, in.b, in.A_log, in.dt_bias, states, kRaggedBatch, o, algorithm);
    for (size_t s = 0; s < kRaggedBatch.size(); ++s) {
      const SequenceRows& seq = kRaggedBatch[s];
      Tensor alone_state = test::clone(initial[s]), alone_o = Tensor::zeros(DType::kF32, {seq.count, nv, dv});
      run_gdn(be, in, seq.begin, seq.begin + seq.count, seq.past, alone_state, alone_o, algorithm);
      EXPECT_TRUE(test::same_bits(o.rows(seq.begin, seq.begin + seq.count), alone_o)) << "sequence " << s;
      EXPECT_TRUE(test::same_bits(batched_states[s], alone_state)) << "sequence " << s;
    }
  }
}

TEST(CausalConv1d, BatchedCallIsBitIdenticalToEachSequenceAlone) {
  const int64_t T = 108, C = 13, K = 4;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  CpuBackend be;
  const Tensor x = test::random_tensor(rng, {T, C}), w = test::random_tensor(rng, {C, K});
  std::vector<Tensor> initial, batched_states;
  for (size_t s = 0; s < kRaggedBatch.size(); ++s) initial.push_back(test::random_tensor(rng, {C, K - 1}));
  for (const Tensor& s : initial) batched_states.push_back(test::clone(s));
  std::vector<Tensor*> states;
  for (Tensor& s : batched_states) states.push_back(&s);
  Tensor y = Tensor::zeros(DType::kF32, {T, C});
  be.causal_conv1d_silu(x, w, states, kRaggedBatch, y);
  for (size_t s = 0; s < kRaggedBatch.size(); ++s) {
    const SequenceRows& seq = kRaggedBatch[s];
    Tensor alone_state = test::clone(initial[s]), alone_y = Tensor::zeros(DType::kF32, {seq.count, C});
    be.causal_conv1d_silu(x.rows(seq.begin, seq.begin + seq.count), w, {&alone_state},
                          BatchRows{SequenceRows{0, seq.count, seq.past}}, alone_y);
    EXPECT_TRUE(test::same_bits(y.rows(seq.begin, seq.begin + seq.count), alone_y)) << "sequence " << s;
    EXPECT_TRUE(test::same_bits(batched_states[s], alone_state)) << "sequence " << s;
  }
  // Each sequence's first output reads its own history, not the rows of the sequence before it.
  const SequenceRows& second = kRaggedBatch[1];
  for (int64_t c = 0; c < C; ++c) {
    float acc = 0.0f;
    for (int64_t j = 0; j < K - 1; ++j) acc += w.f32()[c * K + j] * initial[1].f32()[c * (K - 1) + j];
    acc += w.f32()[c * K + K - 1] * x.f32()[second.begin * C + c];
    EXPECT_FLOAT_EQ(y.f32()[second.begin * C + c], cpu::silu(acc));
  }
}

TEST(CausalConv1d, StateCarriesAcrossCalls) {
  const int64_t T = 11, C = 5, K = 4;
  std::mt19937_64 rng(3);
  CpuBackend be;
  const Tensor x = test::random_tensor(rng, {T, C}), w = test::random_tensor(rng, {C, K});
  Tensor state_whole = Tensor::zeros(DType::kF32, {C, K - 1}), y_whole = Tensor::zeros(DType::kF32, {T, C});
  be.causal_conv1d_silu(x, w, {&state_whole}, BatchRows{SequenceRows{0, T, 0}}, y_whole);
  Tensor state = Tensor::zeros(DType::kF32, {C, K - 1}), y = Tensor::zeros(DType::kF32, {T, C});
  for (int64_t t = 0; t < T; t += (t < 2 ? 1 : 4)) {
    const int64_t end = std::min(T, t + (t < 2 ? 1 : 4));
    Tensor part = y.rows(t, end);
    be.causal_conv1d_silu(x.rows(t, end), w, {&state}, BatchRows{SequenceRows{0, end - t, t}}, part);
  }
  EXPECT_EQ(test::max_abs_diff(y_whole, y), 0.0f);
  EXPECT_EQ(test::max_abs_diff(state_whole, state), 0.0f);
  // The first output sees only the current input (zero history): SiLU(w[c, K-1] x[0, c]).
  for (int64_t c = 0; c < C; ++c) EXPECT_FLOAT_EQ(y_whole.f32()[c], cpu::silu(w.f32()[c * K + K - 1] * x.f32()[c]));
}

// A verification's trail states are each the state its token leaves alone, on both state shapes.
TEST(GdnTrails, EachTrailStateIsItsTokensStateAlone) {
  CpuBackend be;
  for (const std::vector<std::string>& mismatches :
       {test::trail_mismatches(be, 32, 32, 3), test::trail_mismatches(be, 16, 18, 4)}) {
    for (const std::string& m : mismatches) ADD_FAILURE() << m;
  }
}

// Trails that the rule cannot write, that outnumber a sequence's tokens, or that share memory with a state are
// refused before anything is written.
TEST(GdnTrails, RefusesTrailsItCannotKeep) {
  const int64_t T = 3, nk = 1, nv = 2, dk = 4, dv = 4;
  std::mt19937_64 rng(8);
  CpuBackend be;
  const GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  Tensor state = test::clone(in.state), o = Tensor::zeros(DType::kF32, {T, nv, dv});
  Tensor t0 = test::clone(in.state), t1 = test::clone(in.state), t2 = test::clone(in.state);
  const auto call = [&](const StateTrails& trails, GdnAlgorithm algorithm) {
    be.gated_delta_rule(in.qkv, nk, in.a, in.b, in.A_log, in.dt_bias, {&state}, {{0, T, 0}}, o, algorithm, trails);
  };
  EXPECT_THROW(call({{&t0, &t1}}, GdnAlgorithm::kChunked), Error);         // the chunked form keeps no trail
  EXPECT_THROW(call({{&t0, &t1, &t2}}, GdnAlgorithm::kRecurrent), Error);  // a trail state after the last token
  EXPECT_THROW(call({{&t0, &state}}, GdnAlgorithm::kRecurrent), Error);    // the state itself
  EXPECT_THROW(call({{&t0, &t0}}, GdnAlgorithm::kRecurrent), Error);       // one state twice
  EXPECT_THROW(call({{&t0}, {&t1}}, GdnAlgorithm::kRecurrent), Error);     // two trails for one sequence
  Tensor small = Tensor::zeros(DType::kF32, {nv, dk, dv - 1});
  EXPECT_THROW(call({{&small}}, GdnAlgorithm::kRecurrent), Error);  // shaped otherwise
  EXPECT_TRUE(test::same_bits(state, in.state));
  Tensor conv_state = Tensor::zeros(DType::kF32, {3, 3}), conv_trail = Tensor::zeros(DType::kF32, {3, 3});
  Tensor y = Tensor::zeros(DType::kF32, {1, 3});
  EXPECT_THROW(be.causal_conv1d_silu(Tensor::zeros(DType::kF32, {1, 3}), Tensor::zeros(DType::kF32, {3, 4}),
                                     {&conv_state}, {{0, 1, 0}}, y, {{&conv_trail}}),
               Error);  // a lone token keeps no trail: its state is the final one
}

// A batch layout that does not tile the rows, or that has a state too few, is refused before anything is written.
TEST(GatedDeltaRule, RefusesBadBatchLayouts) {
  const int64_t T = 6, nk = 1, nv = 2, dk = 4, dv = 4;
  std::mt19937_64 rng(5);
  CpuBackend be;
  const GdnInputs in = random_gdn_inputs(rng, T, nk, nv, dk, dv);
  Tensor s0 = test::clone(in.state), s1 = test::clone(in.state), o = Tensor::zeros(DType::kF32, {T, nv, dv});
  const auto call = [&](const std::vector<Tensor*>& states, const BatchRows& batch) {
    be.gated_delta_rule(in.qkv, nk, in.a, in.b, in.A_log, in.dt_bias, states, batch, o, GdnAlgorithm::kChunked);
  };
  EXPECT_THROW(call({&s0, &s1}, {{0, 2, 0}, {3, 3, 0}}), Error);  // a gap
  EXPECT_THROW(call({&s0, &s1}, {{0, 2, 0}, {2, 3, 0}}), Error);  // short of T
  EXPECT_THROW(call({&s0}, {{0, 2, 0}, {2, 4, 0}}), Error);       // one state for two sequences
  EXPECT_THROW(call({&s0, &s1}, {{0, 0, 0}, {0, 6, 0}}), Error);  // an empty sequence
  EXPECT_TRUE(test::same_bits(s0, in.state));
  EXPECT_TRUE(test::same_bits(s1, in.state));
  Tensor conv_state = Tensor::zeros(DType::kF32, {3, 3}), y = Tensor::zeros(DType::kF32, {T, 3});
  EXPECT_THROW(be.causal_conv1d_silu(Tensor::zeros(DType::kF32, {T, 3}), Tensor::zeros(DType::kF32, {3, 4}),
                                     {&conv_state}, {{0, 5, 0}}, y),
               Error);
}

}  // namespace
}  // namespace plumb
