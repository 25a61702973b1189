// Gated DeltaNet on the CPU: causal conv1d, the gates, and the gated delta rule, both token by token and chunked
// (the WY form of ../shared/docs/qwen3-next-spec.md §10). Everything is FP32; the two algorithms are tested against
// each other.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/parallel.h"

namespace plumb {
namespace {

constexpr float kL2NormEps = 1e-6f;

// Per-head inputs of the delta rule for one value head, gathered from the [T, heads, dim] tensors: q and k
// L2-normalized (q also scaled by dk^-1/2), as the recurrence consumes them.
struct HeadInputs {
  int64_t tokens, dk, dv;
  std::vector<float> q, k, v;  // [T, dk], [T, dk], [T, dv]
  std::vector<float> g, beta;  // [T]
};

// x ← x / sqrt(Σx² + eps) · scale, rounding after the normalization and again after the scale, as the reference does.
void l2_normalize(float* x, int64_t n, float scale) {
  const float inv = 1.0f / std::sqrt(cpu::dot(x, x, n) + kL2NormEps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * scale;
}

// The gates of the delta rule for one token and value head h: beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias).
struct Gates {
  float g, beta;
};
Gates gates(float a, float b, float A_log, float dt_bias) {
  return {-std::exp(A_log) * cpu::softplus(a + dt_bias), cpu::sigmoid(b)};
}

// Value head h of rows [begin, begin + count) of qkv [T, 2·nk·dk + nv·dv] and a, b [T, nv].
HeadInputs gather_head(const Tensor& qkv, int64_t nk, int64_t dk, int64_t nv, int64_t dv, const Tensor& a,
                       const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, int64_t begin, int64_t count,
                       int64_t h) {
  const int64_t C = qkv.dim(1);
  const int64_t kh = h / (nv / nk);  // value head h reads key head h / (nv / nk)
  HeadInputs in{count,
                dk,
                dv,
                std::vector<float>(count * dk),
                std::vector<float>(count * dk),
                std::vector<float>(count * dv),
                std::vector<float>(count),
                std::vector<float>(count)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t t = 0; t < count; ++t) {
    const float* row = qkv.f32() + (begin + t) * C;
    std::memcpy(&in.q[t * dk], row + kh * dk, dk * sizeof(float));
    std::memcpy(&in.k[t * dk], row + (nk + kh) * dk, dk * sizeof(float));
    std::memcpy(&in.v[t * dv], row + 2 * nk * dk + h * dv, dv * sizeof(float));
    l2_normalize(&in.q[t * dk], dk, scale);
    l2_normalize(&in.k[t * dk], dk, 1.0f);
    const int64_t i = (begin + t) * nv + h;
    const Gates gt = gates(a.f32()[i], b.f32()[i], A_log.f32()[h], dt_bias.f32()[h]);
    in.g[t] = gt.g;
    in.beta[t] = gt.beta;
  }
  return in;
}

// S [dk, dv] in place; o [T, dv]. trail[t], for t < trail.size(), receives S after token t.
void delta_rule_recurrent(const HeadInputs& in, float* S, float* o, std::span<float* const> trail) {
  const int64_t dk = in.dk, dv = in.dv;
  std::vector<float> delta(dv);
  for (int64_t t = 0; t < in.tokens; ++t) {
    const float* k = &in.k[t * dk];
    const float* q = &in.q[t * dk];
    const float decay = std::exp(in.g[t]);
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
    // delta = beta (v - Sᵀk)
    for (int64_t j = 0; j < dv; ++j) {
      float m = 0.0f;
      for (int64_t i = 0; i < dk; ++i) m += S[i * dv + j] * k[i];
      delta[j] = in.beta[t] * (in.v[t * dv + j] - m);
    }
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j) S[i * dv + j] += k[i] * delta[j];
    for (int64_t j = 0; j < dv; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * q[i];
      o[t * dv + j] = acc;
    }
    if (t < static_cast<int64_t>(trail.size())) std::memcpy(trail[t], S, dk * dv * sizeof(float));
  }
}

// The chunked form. Within a chunk of L tokens with cumulative log-decay γ (Γ = exp γ):
//   A[i, j] = β_i e^{γ_i − γ_j} k_i·k_j (j < i);  U = (I + A)^-1 diag(β) V;  W = (I + A)^-1 diag(βΓ) K
//   Δ = U − W S0;  O = diag(Γ) Q S0 + (QKᵀ ⊙ D) Δ with D[r, i] = e^{γ_r − γ_i} (i ≤ r)
//   S = Γ_L S0 + Σ_i e^{γ_L − γ_i} k_i Δ_iᵀ
// Chunks end at multiples of kGdnChunkSize of the sequence's position: the first token sits at position `past`.
void delta_rule_chunked(const HeadInputs& in, int64_t past, float* S, float* o) {
  const int64_t dk = in.dk, dv = in.dv;
  std::vector<float> gamma, A, U, W, delta, S0(dk * dv);
  for (int64_t c0 = 0; c0 < in.tokens;) {
    const int64_t L = std::min(kGdnChunkSize - (past + c0) % kGdnChunkSize, in.tokens - c0);
    const float* K = &in.k[c0 * dk];
    const float* Q = &in.q[c0 * dk];
    const float* V = &in.v[c0 * dv];
    const float* beta = &in.beta[c0];
    gamma.assign(L, 0.0f);
    float running = 0.0f;
    for (int64_t r = 0; r < L; ++r) gamma[r] = running += in.g[c0 + r];

    A.assign(L * L, 0.0f);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < i; ++j)
        A[i * L + j] = beta[i] * std::exp(gamma[i] - gamma[j]) * cpu::dot(K + i * dk, K + j * dk, dk);

    // Forward substitution: row i of (I + A) X = B gives x_i = b_i − Σ_{j<i} A[i, j] x_j.
    U.assign(L * dv, 0.0f);
    W.assign(L * dk, 0.0f);
    for (int64_t i = 0; i < L; ++i) {
      const float gi = std::exp(gamma[i]);
      for (int64_t c = 0; c < dv; ++c) U[i * dv + c] = beta[i] * V[i * dv + c];
      for (int64_t c = 0; c < dk; ++c) W[i * dk + c] = beta[i] * gi * K[i * dk + c];
      for (int64_t j = 0; j < i; ++j) {
        const float a = A[i * L + j];
        for (int64_t c = 0; c < dv; ++c) U[i * dv + c] -= a * U[j * dv + c];
        for (int64_t c = 0; c < dk; ++c) W[i * dk + c] -= a * W[j * dk + c];
      }
    }

    std::memcpy(S0.data(), S, dk * dv * sizeof(float));
    delta.assign(L * dv, 0.0f);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t c = 0; c < dv; ++c) {
        float ws = 0.0f;
        for (int64_t x = 0; x < dk; ++x) ws += W[i * dk + x] * S0[x * dv + c];
        delta[i * dv + c] = U[i * dv + c] - ws;
      }

    for (int64_t r = 0; r < L; ++r) {
      const float gr = std::exp(gamma[r]);
      float* out = o + (c0 + r) * dv;
      for (int64_t c = 0; c < dv; ++c) {
        float inter = 0.0f;
        for (int64_t x = 0; x < dk; ++x) inter += Q[r * dk + x] * S0[x * dv + c];
        out[c] = gr * inter;
      }
      for (int64_t i = 0; i <= r; ++i) {
        const float p = std::exp(gamma[r] - gamma[i]) * cpu::dot(Q + r * dk, K + i * dk, dk);
        for (int64_t c = 0; c < dv; ++c) out[c] += p * delta[i * dv + c];
      }
    }

    const float g_last = gamma[L - 1];
    const float decay_last = std::exp(g_last);
    for (int64_t i = 0; i < dk * dv; ++i) S[i] = decay_last * S0[i];
    for (int64_t i = 0; i < L; ++i) {
      const float w = std::exp(g_last - gamma[i]);
      for (int64_t x = 0; x < dk; ++x) {
        const float kx = w * K[i * dk + x];
        for (int64_t c = 0; c < dv; ++c) S[x * dv + c] += kx * delta[i * dv + c];
      }
    }
    c0 += L;
  }
}

}  // namespace

void CpuBackend::causal_conv1d_silu(const Tensor& x, const Tensor& w, const std::vector<Tensor*>& states,
                                    const BatchRows& batch, Tensor& y, const StateTrails& trails) {
  const int64_t T = x.dim(0), C = x.dim(1), K = w.dim(1);
  expect_shape(w, {C, K}, "causal_conv1d_silu", "w");
  expect_shape(y, {T, C}, "causal_conv1d_silu", "y");
  expect_batch(batch, T, states.size(), "causal_conv1d_silu");
  for (const Tensor* state : states) expect_shape(*state, {C, K - 1}, "causal_conv1d_silu", "state");
  expect_distinct_states(states, "causal_conv1d_silu");
  expect_trails(trails, states, batch, "causal_conv1d_silu");
  const float *px = x.f32(), *pw = w.f32();
  float* py = y.f32();
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t begin = batch[s].begin, count = batch[s].count;
    float* ps = states[s]->f32();
    parallel_for(C, 64, [&](int64_t c_begin, int64_t c_end) {
      std::vector<float> window(static_cast<size_t>(K - 1 + count));  // the K-1 previous inputs, then the new ones
      for (int64_t c = c_begin; c < c_end; ++c) {
        for (int64_t j = 0; j < K - 1; ++j) window[j] = ps[c * (K - 1) + j];
        for (int64_t t = 0; t < count; ++t) window[K - 1 + t] = px[(begin + t) * C + c];
        for (int64_t t = 0; t < count; ++t) {
          float acc = 0.0f;
          for (int64_t j = 0; j < K; ++j) acc += pw[c * K + j] * window[t + j];
          py[(begin + t) * C + c] = cpu::silu(acc);
        }
        for (int64_t j = 0; j < K - 1; ++j) ps[c * (K - 1) + j] = window[count + j];
        // The state after token t: the K-1 inputs that end at it.
        for (size_t t = 0; !trails.empty() && t < trails[s].size(); ++t)
          for (int64_t j = 0; j < K - 1; ++j) trails[s][t]->f32()[c * (K - 1) + j] = window[t + 1 + j];
      }
    });
  }
}

void CpuBackend::gated_delta_rule(const Tensor& qkv, int64_t key_heads, const Tensor& a, const Tensor& b,
                                  const Tensor& A_log, const Tensor& dt_bias, const std::vector<Tensor*>& states,
                                  const BatchRows& batch, Tensor& o, GdnAlgorithm algorithm,
                                  const StateTrails& trails) {
  const char* op = "gated_delta_rule";
  PLUMB_CHECK(o.rank() == 3, "{}: o must be [T, nv, dv], got {}", op, shape_str(o.shape()));
  const int64_t T = o.dim(0), nv = o.dim(1), dv = o.dim(2), nk = key_heads;
  PLUMB_CHECK(!states.empty() && states[0]->rank() == 3, "{}: states must be [nv, dk, dv]", op);
  const int64_t dk = states[0]->dim(1);
  PLUMB_CHECK(nk > 0 && nv % nk == 0, "{}: {} value heads are not a multiple of {} key heads", op, nv, nk);
  expect_shape(qkv, {T, 2 * nk * dk + nv * dv}, op, "qkv");
  expect_shape(a, {T, nv}, op, "a");
  expect_shape(b, {T, nv}, op, "b");
  expect_shape(A_log, {nv}, op, "A_log");
  expect_shape(dt_bias, {nv}, op, "dt_bias");
  expect_batch(batch, T, states.size(), op);
  for (const Tensor* state : states) expect_shape(*state, {nv, dk, dv}, op, "state");
  expect_distinct_states(states, op);
  expect_trails(trails, states, batch, op);
  PLUMB_CHECK(trails.empty() || algorithm == GdnAlgorithm::kRecurrent, "{}: trail states need the recurrent rule", op);
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceRows& seq = batch[s];
    const GdnPieces pieces = gdn_pieces(seq.past, seq.count, algorithm);
    parallel_for(nv, 1, [&](int64_t h_begin, int64_t h_end) {
      std::vector<float> out(seq.count * dv);
      std::vector<float*> trail;  // [trail tokens] value head h of each trail state
      for (int64_t h = h_begin; h < h_end; ++h) {
        float* S = states[s]->f32() + h * dk * dv;
        trail.clear();
        for (size_t t = 0; !trails.empty() && t < trails[s].size(); ++t)
          trail.push_back(trails[s][t]->f32() + h * dk * dv);
        for (int i = 0; i < pieces.size; ++i) {
          const GdnPiece& piece = pieces.piece[i];
          const HeadInputs in =
              gather_head(qkv, nk, dk, nv, dv, a, b, A_log, dt_bias, seq.begin + piece.offset, piece.count, h);
          float* piece_out = out.data() + piece.offset * dv;
          if (piece.chunked)
            delta_rule_chunked(in, seq.past + piece.offset, S, piece_out);
          else
            delta_rule_recurrent(
                in, S, piece_out,
                std::span<float* const>(trail).subspan(std::min(trail.size(), static_cast<size_t>(piece.offset))));
        }
        for (int64_t t = 0; t < seq.count; ++t)
          std::memcpy(o.f32() + ((seq.begin + t) * nv + h) * dv, &out[t * dv], dv * sizeof(float));
      }
    });
  }
}

}  // namespace plumb
