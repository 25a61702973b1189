// The op catalogue: every computation the model's forward pass needs, declared once as a Backend interface. The CPU
// backend (src/backends/cpu) is the reference every other backend is checked against; the forward pass
// (src/model/qwen3_next.cpp) is written against this interface only, so it runs unchanged on any backend.
//
// Conventions: tensors are contiguous and row-major; shapes below are written outermost first. Activations are F32 on
// the CPU backend. Weights [N, K] follow PyTorch's [out_features, in_features] and may be F32, BF16 or F16.
// Symbols: T tokens, H hidden size, V vocabulary, nk/nv key/value heads of Gated DeltaNet with head dims dk/dv,
// nq/nkv query/KV heads of full attention with head dim d, E experts, I expert intermediate size.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace plumb {

// How an RMSNorm applies its weight w: Qwen's zero-centred norms store w as an offset from 1.
enum class NormWeight {
  kZeroCentred,  // y = x / rms(x) * (1 + w)
  kPlain,        // y = x / rms(x) * w
};

// How gated_delta_rule walks the sequence. Both compute the same function; tests hold them to each other.
enum class GdnAlgorithm {
  kRecurrent,  // token by token (decode)
  kChunked,    // chunks of kGdnChunkSize tokens in the WY form (prefill)
};
constexpr int64_t kGdnChunkSize = 64;

// The routed experts of one MoE layer: views of expert e's matrices, whatever the checkpoint's layout.
struct ExpertWeights {
  std::vector<Tensor> gate_proj;  // E × [I, H]
  std::vector<Tensor> up_proj;    // E × [I, H]
  std::vector<Tensor> down_proj;  // E × [H, I]
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // Memory.
  virtual Tensor zeros(DType dtype, const Shape& shape) = 0;
  virtual Tensor upload(const Tensor& host) = 0;          // the tensor in this backend's memory (F32 on the CPU)
  virtual Tensor download(const Tensor& t) = 0;           // a host copy
  virtual void copy(const Tensor& src, Tensor& dst) = 0;  // same element count and dtype

  // out[t, :] = table[ids[t], :]. table [V, H]; out [T, H].
  virtual void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) = 0;
  // y[t, n] = Σ_k x[t, k] · w[n, k]. x [T, K]; w [N, K]; y [T, N].
  virtual void linear(const Tensor& x, const Tensor& w, Tensor& y) = 0;
  // Per row r of x [R, D]: y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ (1 + w or w). w [D].
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight kind, Tensor& y) = 0;
  // Gated RMSNorm of Gated DeltaNet: y = x / sqrt(mean(x²) + eps) ⊙ w ⊙ SiLU(z), per row. x, z, y [R, D]; w [D].
  virtual void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) = 0;
  // dst [R, end - begin] = src[:, begin:end] for src [R, C].
  virtual void slice_columns(const Tensor& src, int64_t begin, int64_t end, Tensor& dst) = 0;

  // Depthwise causal conv1d over time, then SiLU: y[t, c] = SiLU(Σ_j w[c, j] · x[t - (K-1) + j, c]), where inputs
  // before the first token come from state. x [T, C]; w [C, K]; state [C, K-1] holds the K-1 previous inputs
  // (oldest first) and is updated to the last K-1 inputs; y [T, C].
  virtual void causal_conv1d_silu(const Tensor& x, const Tensor& w, Tensor& state, Tensor& y) = 0;
  // Gated DeltaNet gates per token and value head: beta = sigmoid(b), g = -exp(A_log) · softplus(a + dt_bias).
  // a, b, g, beta [T, nv]; A_log, dt_bias [nv].
  virtual void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& g,
                         Tensor& beta) = 0;
  // The gated delta rule. q and k are L2-normalized per head (eps 1e-6 inside the root) and q scaled by dk^-1/2;
  // value head h reads key head h / (nv / nk). Per token: S ← exp(g)·S; S ← S + k (beta (v − Sᵀk))ᵀ; o = Sᵀq.
  // q, k [T, nk, dk]; v [T, nv, dv]; g, beta [T, nv]; state [nv, dk, dv] F32 (in: S before the first token, out: S
  // after the last); o [T, nv, dv].
  virtual void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                Tensor& state, Tensor& o, GdnAlgorithm algorithm) = 0;

  // Rotate-half rotary embedding on the first rotary_dim dims of each head, in place. x [T, heads, d]; positions [T].
  virtual void rotary_embedding(Tensor& x, const std::vector<int64_t>& positions, int64_t rotary_dim, double theta) = 0;
  // Causal grouped-query attention over a KV cache whose rows [0, past + T) are filled; query t sits at position
  // past + t and sees keys [0, past + t]. Scores scaled by d^-1/2. q [T, nq, d]; k_cache, v_cache [capacity, nkv, d];
  // o [T, nq, d].
  virtual void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t past, Tensor& o) = 0;

  // x ← x ⊙ sigmoid(gate), elementwise; x and gate have the same element count.
  virtual void mul_sigmoid(Tensor& x, const Tensor& gate) = 0;
  // x[r, :] ← x[r, :] · sigmoid(gate[r]) for x [R, D], gate [R, 1].
  virtual void mul_sigmoid_rows(Tensor& x, const Tensor& gate) = 0;
  // out = SiLU(gate) ⊙ up.
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  // x ← x + y.
  virtual void add(Tensor& x, const Tensor& y) = 0;

  // Router: p = softmax(logits[t]) over all E experts, keep the top_k (ties to the lower expert id), optionally
  // divide by their sum. logits [T, E]; expert_ids [T, top_k] I32; expert_weights [T, top_k] F32, best first.
  virtual void moe_route(const Tensor& logits, int64_t top_k, bool renormalize, Tensor& expert_ids,
                         Tensor& expert_weights) = 0;
  // y[t] = Σ_j weights[t, j] · down_e(SiLU(gate_e x[t]) ⊙ up_e x[t]) with e = expert_ids[t, j].
  // x [T, H]; expert_ids, expert_weights [T, top_k]; y [T, H].
  virtual void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                           const ExpertWeights& experts, Tensor& y) = 0;
};

}  // namespace plumb
