// The exactness contract's refusals, checked the same way on every backend: two sequences of one call on one state,
// a KV page that one sequence writes while another uses it, and expert ids outside [0, E) are errors naming them.
// Header-only with gtest assertions: each backend's test file calls these with its own backend.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"

namespace plumb::test {

// Runs `call` and expects a plumb::Error whose message contains `words`.
template <typename F>
void expect_error_naming(F&& call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << "expected an error naming \"" << words << "\", got none";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << "the error was: " << e.what();
  }
}

// A host tensor of F32 values i * 0.01, uploaded.
inline Tensor ramp(Backend& be, const Shape& shape) {
  Tensor t = Tensor::zeros(DType::kF32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  return be.upload(t);
}

inline void expect_gdn_refuses_a_shared_state(Backend& be) {
  const int64_t nk = 1, nv = 2, dk = 8, dv = 8, C = 2 * nk * dk + nv * dv, K = 4, T = 3;
  const Tensor x = ramp(be, {T, C}), w = ramp(be, {C, K}), a = ramp(be, {T, nv}), b = ramp(be, {T, nv});
  const Tensor A_log = ramp(be, {nv}), dt_bias = ramp(be, {nv});
  Tensor y = be.zeros(DType::kF32, {T, C}), o = be.zeros(DType::kF32, {T, nv, dv});
  Tensor conv = be.zeros(DType::kF32, {C, K - 1}), other_conv = be.zeros(DType::kF32, {C, K - 1});
  Tensor S = be.zeros(DType::kF32, {nv, dk, dv}), other_S = be.zeros(DType::kF32, {nv, dk, dv});
  const BatchRows batch = {{0, 2, 0}, {2, 1, 5}};
  expect_error_naming(
      [&] {
        be.causal_conv1d_silu(x, w, {&conv, &conv}, batch, y);
      },
      "sequences 0 and 1 of one call share a state");
  expect_error_naming(
      [&] {
        be.gated_delta_rule(x, nk, a, b, A_log, dt_bias, {&S, &S}, batch, o, GdnAlgorithm::kChunked);
      },
      "sequences 0 and 1 of one call share a state");
  // A view into another sequence's state overlaps it just the same.
  Tensor both = be.zeros(DType::kF32, {2 * nv, dk, dv});
  Tensor low = both.rows(0, nv), overlapping = both.rows(1, nv + 1), high = both.rows(nv, 2 * nv);
  expect_error_naming(
      [&] {
        be.gated_delta_rule(x, nk, a, b, A_log, dt_bias, {&low, &overlapping}, batch, o, GdnAlgorithm::kChunked);
      },
      "share a state");
  EXPECT_NO_THROW(be.causal_conv1d_silu(x, w, {&conv, &other_conv}, batch, y));
  EXPECT_NO_THROW(be.gated_delta_rule(x, nk, a, b, A_log, dt_bias, {&low, &high}, batch, o, GdnAlgorithm::kChunked));
  EXPECT_NO_THROW(be.gated_delta_rule(x, nk, a, b, A_log, dt_bias, {&S, &other_S}, batch, o, GdnAlgorithm::kChunked));
}

inline void expect_attention_refuses_a_shared_written_page(Backend& be) {
  const int64_t nq = 2, nkv = 1, d = 8, T = 2;
  const Tensor q = ramp(be, {T, nq, d}), k = ramp(be, {T, nkv, d});
  const Tensor pool = be.zeros(be.kv_dtype(), {4, kKvPageSize, nkv, d});
  Tensor o = be.zeros(DType::kF32, {T, nq, d});
  auto call = [&](std::vector<int32_t> first, std::vector<int32_t> second, int64_t past0, int64_t past1) {
    KvCache a{pool, pool, first}, b{pool, pool, second};
    be.attention(q, k, k, {&a, &b}, BatchRows{{0, 1, past0}, {1, 1, past1}}, o, GdnAlgorithm::kChunked);
    be.synchronize();
  };
  // Both write position 3 of page 1.
  expect_error_naming([&] { call({1}, {1}, 3, 3); }, "sequences 0 and 1 of one call share KV page 1");
  // Sequence 1 writes page 2 (position 69, its second page), which sequence 0 reads (its first page).
  expect_error_naming(
      [&] {
        call({2, 3}, {0, 2}, 70, 69);
      },
      "sequences 0 and 1 of one call share KV page 2, which sequence 1 writes");
  EXPECT_NO_THROW(call({1}, {2}, 3, 3));
  // A full page both only read (positions 0..63 of page 0) may be shared, as a prefix cache shares it.
  EXPECT_NO_THROW(call({0, 1}, {0, 2}, 64, 70));
}

// Three tokens, and twenty: on the GPU a few tokens' pairs group in one warp, more in one block, and both report.
inline void expect_moe_experts_refuses_bad_ids(Backend& be) {
  for (const int64_t T : {3, 20}) {
    const int64_t H = 8, I = 4, E = 3, top_k = 2;
    const ExpertWeights experts{be.upload(Tensor::zeros(DType::kF32, {E, 2 * I, H})),
                                be.upload(Tensor::zeros(DType::kF32, {E, H, I}))};
    const Tensor x = ramp(be, {T, H}), weights = ramp(be, {T, top_k});
    Tensor y = be.zeros(DType::kF32, {T, H});
    auto call = [&](int32_t bad, int64_t at) {
      Tensor ids = Tensor::zeros(DType::kI32, {T, top_k});
      for (int64_t i = 0; i < T * top_k; ++i) ids.data_as<int32_t>()[i] = static_cast<int32_t>(i % E);
      ids.data_as<int32_t>()[at] = bad;
      const Tensor device_ids = be.upload(ids);
      be.moe_experts(x, device_ids, weights, experts, y);
      be.synchronize();
    };
    expect_error_naming([&] { call(E, 3); }, "token 1 slot 1 has expert id 3, outside [0, 3)");
    expect_error_naming([&] { call(-1, 4); }, "token 2 slot 0 has expert id -1, outside [0, 3)");
    EXPECT_NO_THROW(call(E - 1, 3));  // and the failure left nothing behind for the next call
  }
}

// A draw whose allowed-token bits allow no token of the row (those past the vocabulary do not count) is refused
// naming the row; one that allows only the last token is drawn as that token, greedy or sampled.
inline void expect_sample_tokens_refuses_a_row_allowing_nothing(Backend& be) {
  const int64_t V = 37;  // two words, the second with 5 tokens
  const Tensor logits = ramp(be, {2, V});
  Tensor ids = be.zeros(DType::kI32, {2});
  std::vector<uint32_t> none{0u, ~0u << 5}, last{0u, 1u << 4};
  std::vector<TokenDraw> draws{TokenDraw{}, TokenDraw{.temperature = 0.8f, .top_p = 0.9f, .seed = 3}};
  draws[1].allowed = none.data();
  expect_error_naming([&] { be.sample_tokens(logits, draws, ids); }, "row 1 allows none of the 37 tokens");
  draws[0].allowed = draws[1].allowed = last.data();
  be.sample_tokens(logits, draws, ids);
  const Tensor got = be.download(ids);
  EXPECT_EQ(got.data_as<int32_t>()[0], V - 1);
  EXPECT_EQ(got.data_as<int32_t>()[1], V - 1);
}

}  // namespace plumb::test
