// Harness cases of the Gated DeltaNet family: causal_conv1d_silu and gated_delta_rule (both algorithms), per
// sequence, on single sequences of awkward lengths and on ragged batches of 3 and 64 with nonzero pasts. Bounds per
// docs/kernel-contract.md §Gated DeltaNet.
#include <cmath>
#include <utility>

#include "op_harness.h"
#include "support/trail_check.h"

namespace plumb::harness {
namespace {

double silu(double z) {
  return z / (1.0 + std::exp(-z));
}

// --- causal_conv1d_silu ---

SequenceOutputs run_conv(Backend& be, const SeqInputs& in) {
  const Tensor& x = in.rows[0];  // [T, C]
  std::vector<Tensor> states;
  std::vector<Tensor*> state_ptrs;
  for (const Tensor& s : in.states) states.push_back(fresh(be, s));  // [C, K-1]
  for (Tensor& s : states) state_ptrs.push_back(&s);
  Tensor y = poisoned(be, DType::kF32, x.shape());
  be.causal_conv1d_silu(be.upload(x), be.upload(in.params[0]), state_ptrs, in.batch, y);
  SequenceOutputs out{fetch_f32(be, y), {}};
  for (const Tensor& s : states) out.states.push_back(fetch_f32(be, s));
  return out;
}

void conv_case(Context& c) {
  const int64_t K = 4;
  for (int64_t C : {int64_t{77}, int64_t{208}}) {
    const Tensor w = normal(c.rng, {C, K}, 0.5f);
    for (const BatchRows& batch : standard_batches(c.rng)) {
      const int64_t T = batch_tokens(batch);
      SeqInputs in{{normal(c.rng, {T, C})}, {w}, {}, batch};
      for (size_t i = 0; i < batch.size(); ++i) in.states.push_back(normal(c.rng, {C, K - 1}));
      // y = SiLU(a), a a K-term sum: (K + 1) roundings of Σ|w·x| on each side, through |SiLU'| ≤ 1.1, then SiLU's
      // own error. The state is a copy of inputs: exact.
      std::vector<double> bound(static_cast<size_t>(T * C));
      std::vector<std::vector<double>> state_bounds(batch.size(), std::vector<double>(C * (K - 1), 0.0));
      for (const SequenceRows& s : batch)
        for (int64_t ch = 0; ch < C; ++ch) {
          const float* prev = in.states[&s - batch.data()].f32() + ch * (K - 1);
          for (int64_t t = 0; t < s.count; ++t) {
            double a = 0, abs_sum = 0;
            for (int64_t j = 0; j < K; ++j) {
              const int64_t src = t - (K - 1) + j;  // < 0: from the state
              const double xv = src < 0 ? prev[K - 1 + src] : in.rows[0].f32()[(s.begin + src) * C + ch];
              a += w.f32()[ch * K + j] * xv;
              abs_sum += std::fabs(w.f32()[ch * K + j] * xv);
            }
            bound[(s.begin + t) * C + ch] =
                1.1 * 2.0 * (K + 1) * kF32Unit * abs_sum + (4 * kF32Unit + 2 * kTranscendental) * std::fabs(silu(a));
          }
        }
      judge_sequences(c, "causal_conv1d_silu C=" + std::to_string(C) + " " + batch_label(batch), in, run_conv, bound,
                      state_bounds);
    }
  }
}

// --- gated_delta_rule ---

struct GdnShape {
  int64_t nk, nv, dk, dv;
};

SeqOp gdn_op(int64_t nk, GdnAlgorithm algorithm) {
  return [nk, algorithm](Backend& be, const SeqInputs& in) {
    const Tensor& qkv = in.rows[0];  // [T, 2·nk·dk + nv·dv]
    const int64_t T = qkv.dim(0), nv = in.params[0].dim(0), dv = in.states[0].dim(2);
    std::vector<Tensor> states;
    std::vector<Tensor*> state_ptrs;
    for (const Tensor& s : in.states) states.push_back(fresh(be, s));  // [nv, dk, dv]
    for (Tensor& s : states) state_ptrs.push_back(&s);
    Tensor o = poisoned(be, DType::kF32, {T, nv, dv});
    be.gated_delta_rule(be.upload(qkv), nk, be.upload(in.rows[1]), be.upload(in.rows[2]), be.upload(in.params[0]),
                        be.upload(in.params[1]), state_ptrs, in.batch, o, algorithm);
    SequenceOutputs out{fetch_f32(be, o), {}};
    for (const Tensor& s : states) out.states.push_back(fetch_f32(be, s));
    return out;
  };
}

// Inputs of realistic magnitude: qkv and the gate inputs ~ N(0, 1) (projection outputs), A_log = log U(1, 16) and
// dt_bias = softplus⁻¹(dt) with dt log-uniform in [1e-3, 1e-1] (the model's initialization), states ~ N(0, dk^-1/2)
// (columns of norm ~1, as a running state's are).
SeqInputs gdn_inputs(std::mt19937_64& rng, const GdnShape& s, const BatchRows& batch) {
  const int64_t T = batch_tokens(batch);
  Tensor A_log = uniform(rng, {s.nv}, 1.0f, 16.0f), dt_bias = uniform(rng, {s.nv}, std::log(1e-3f), std::log(1e-1f));
  for (int64_t h = 0; h < s.nv; ++h) {
    A_log.f32()[h] = std::log(A_log.f32()[h]);
    dt_bias.f32()[h] = std::log(std::expm1(std::exp(dt_bias.f32()[h])));
  }
  SeqInputs in{{normal(rng, {T, 2 * s.nk * s.dk + s.nv * s.dv}), normal(rng, {T, s.nv}), normal(rng, {T, s.nv})},
               {A_log, dt_bias},
               {},
               batch};
  for (size_t i = 0; i < batch.size(); ++i)
    in.states.push_back(normal(rng, {s.nv, s.dk, s.dv}, 1.0f / std::sqrt(static_cast<float>(s.dk))));
  return in;
}

// The bound of docs/kernel-contract.md §Gated DeltaNet, evaluated along a double-precision run of the recurrence:
// each token adds a local error of c_loc·(‖s_j‖ + |v_j|) to column j of the state, and the update
// s_j ← (I − β k kᵀ) α s_j never amplifies an error (α ≤ 1, 0 < β < 1, ‖k‖ ≤ 1), so E_j ← α E_j + local. An output
// o_j = s_jᵀ q then errs by at most (E_j + c_loc ‖s_j‖)·‖q‖, plus, in the chunked form, the intra-chunk sum's
// rounding over the chunk's tokens so far.
void gdn_bounds(const SeqInputs& in, const GdnShape& sh, GdnAlgorithm algorithm, std::vector<double>& o_bound,
                std::vector<std::vector<double>>& state_bounds) {
  const int64_t nk = sh.nk, nv = sh.nv, dk = sh.dk, dv = sh.dv, width = 2 * nk * dk + nv * dv;
  const double C = static_cast<double>(kGdnChunkSize);
  const double c_loc = 2.0 * (static_cast<double>(dk + 2 * kGdnChunkSize) * kF32Unit + 16 * kTranscendental);
  const bool chunked = algorithm == GdnAlgorithm::kChunked;
  const Tensor &qkv = in.rows[0], &a = in.rows[1], &b = in.rows[2];
  o_bound.assign(static_cast<size_t>(batch_tokens(in.batch) * nv * dv), 0.0);
  state_bounds.assign(in.batch.size(), std::vector<double>(static_cast<size_t>(nv * dk * dv), 0.0));
  std::vector<double> S(dk * dv), E(dv), M(dv), chunk_M(dv), q(dk), k(dk), m(dv);
  for (size_t si = 0; si < in.batch.size(); ++si) {
    const SequenceRows& seq = in.batch[si];
    for (int64_t h = 0; h < nv; ++h) {
      const int64_t kh = h / (nv / nk);
      for (int64_t i = 0; i < dk * dv; ++i) S[i] = in.states[si].f32()[h * dk * dv + i];
      std::fill(E.begin(), E.end(), 0.0);
      std::fill(chunk_M.begin(), chunk_M.end(), 0.0);
      for (int64_t t = 0; t < seq.count; ++t) {
        const int64_t row = seq.begin + t;
        if ((seq.past + t) % kGdnChunkSize == 0) std::fill(chunk_M.begin(), chunk_M.end(), 0.0);
        const float* x = qkv.f32() + row * width;
        double qn = 0, kn = 0;
        for (int64_t i = 0; i < dk; ++i) {
          q[i] = x[kh * dk + i], k[i] = x[nk * dk + kh * dk + i];
          qn += q[i] * q[i], kn += k[i] * k[i];
        }
        for (int64_t i = 0; i < dk; ++i) {
          q[i] /= std::sqrt(qn + 1e-6) * std::sqrt(static_cast<double>(dk));
          k[i] /= std::sqrt(kn + 1e-6);
        }
        const double q_norm = std::sqrt(qn / (qn + 1e-6) / static_cast<double>(dk));
        const double av = a.f32()[row * nv + h] + in.params[1].f32()[h];
        const double g =
            -std::exp(static_cast<double>(in.params[0].f32()[h])) * (av > 20 ? av : std::log1p(std::exp(av)));
        const double alpha = std::exp(g), beta = 1.0 / (1.0 + std::exp(-static_cast<double>(b.f32()[row * nv + h])));
        const float* v = x + 2 * nk * dk + h * dv;
        for (int64_t j = 0; j < dv; ++j) {
          double col = 0;
          for (int64_t i = 0; i < dk; ++i) col += S[i * dv + j] * S[i * dv + j];
          M[j] = std::sqrt(col) + std::fabs(v[j]);
          chunk_M[j] += M[j];
          E[j] = alpha * E[j] + c_loc * M[j];
          m[j] = 0;
          for (int64_t i = 0; i < dk; ++i) m[j] += alpha * S[i * dv + j] * k[i];
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) S[i * dv + j] = alpha * S[i * dv + j] + k[i] * beta * (v[j] - m[j]);
        for (int64_t j = 0; j < dv; ++j) {
          double col = 0;
          for (int64_t i = 0; i < dk; ++i) col += S[i * dv + j] * S[i * dv + j];
          const double intra = chunked ? 2.0 * C * kF32Unit * chunk_M[j] : 0.0;
          o_bound[(row * nv + h) * dv + j] = (E[j] + c_loc * std::sqrt(col) + intra) * q_norm;
        }
      }
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) state_bounds[si][(h * dk + i) * dv + j] = E[j];
    }
  }
}

std::string gdn_label(const GdnShape& s, GdnAlgorithm algorithm) {
  return std::string("gated_delta_rule ") + (algorithm == GdnAlgorithm::kChunked ? "chunked" : "recurrent") +
         " nk=" + std::to_string(s.nk) + " nv=" + std::to_string(s.nv) + " dk=" + std::to_string(s.dk) +
         " dv=" + std::to_string(s.dv);
}

void gdn_run(Context& c, const GdnShape& s, GdnAlgorithm algorithm, const BatchRows& batch) {
  const SeqInputs in = gdn_inputs(c.rng, s, batch);
  std::vector<double> o_bound;
  std::vector<std::vector<double>> state_bounds;
  gdn_bounds(in, s, algorithm, o_bound, state_bounds);
  judge_sequences(c, gdn_label(s, algorithm) + " " + batch_label(batch), in, gdn_op(s.nk, algorithm), o_bound,
                  state_bounds);
}

// A 192-token prompt prefilled as 64 + 128 tokens (state carried between the calls) must equal one 192-token call
// bit for bit: chunk boundaries sit at fixed multiples of the chunk size from the sequence start.
void gdn_split(Context& c, const GdnShape& s, GdnAlgorithm algorithm) {
  judge_split(c, gdn_label(s, algorithm), gdn_inputs(c.rng, s, {{0, 192, 0}}), gdn_op(s.nk, algorithm));
}

const GdnShape kSmall{2, 6, 16, 24}, kLarge{2, 4, 128, 128};

void gdn_case(Context& c, const GdnShape& s, GdnAlgorithm algorithm) {
  for (const BatchRows& batch : standard_batches(c.rng)) gdn_run(c, s, algorithm, batch);
  gdn_split(c, s, algorithm);
}

// Both algorithms on a few small batches: the control of a fault that may live in either kernel.
void gdn_both_small_case(Context& c) {
  for (GdnAlgorithm algorithm : {GdnAlgorithm::kRecurrent, GdnAlgorithm::kChunked}) {
    gdn_run(c, kSmall, algorithm, {{0, 65, 37}});
    gdn_run(c, kSmall, algorithm, {{0, 1, 5}, {1, 65, 64}, {66, 130, 0}});
  }
}

// Sized for a race to show: full-size heads, long sequences and many sequences, both algorithms.
void gdn_race_case(Context& c) {
  for (GdnAlgorithm algorithm : {GdnAlgorithm::kRecurrent, GdnAlgorithm::kChunked}) {
    gdn_run(c, kLarge, algorithm, {{0, 1000, 0}, {1000, 1, 500}, {1001, 300, 64}});
    gdn_run(c, kLarge, algorithm, ragged_batch(c.rng, 64, 40, 200));
  }
}

// Verifications' trails (StateTrails, tests/support/trail_check.h) on both ops: every trail state, final state and
// output row the bits of the same tokens run one a call (whose arithmetic the cases above hold to the CPU reference),
// on the vector and the scalar state paths.
void gdn_trails_case(Context& c) {
  for (const auto& [dk, dv] : {std::pair<int64_t, int64_t>{128, 128}, {16, 18}})
    for (const std::string& m : test::trail_mismatches(c.gpu, dk, dv, c.rng())) c.verdict.fail(m);
}

const CaseRegistrar reg_conv("causal_conv1d_silu", conv_case);
const CaseRegistrar reg_trails("gdn_trails", gdn_trails_case);
const CaseRegistrar reg_gdn_rs("gdn_recurrent_small",
                               [](Context& c) { gdn_case(c, kSmall, GdnAlgorithm::kRecurrent); });
const CaseRegistrar reg_gdn_cs("gdn_chunked_small", [](Context& c) { gdn_case(c, kSmall, GdnAlgorithm::kChunked); });
const CaseRegistrar reg_gdn_rl("gdn_recurrent_large",
                               [](Context& c) { gdn_case(c, kLarge, GdnAlgorithm::kRecurrent); });
const CaseRegistrar reg_gdn_cl("gdn_chunked_large", [](Context& c) { gdn_case(c, kLarge, GdnAlgorithm::kChunked); });
const CaseRegistrar reg_gdn_both("gdn_both_small", gdn_both_small_case);
const CaseRegistrar reg_gdn_race("gdn_race", gdn_race_case);

const ControlRegistrar ctl_conv(cuda::KernelFault::kConvIgnoresState, "causal_conv1d_silu");
const ControlRegistrar ctl_gate(cuda::KernelFault::kGdnGateSign, "gdn_both_small");
const ControlRegistrar ctl_boundary(cuda::KernelFault::kGdnChunkBoundaryOffByOne, "gdn_chunked_small");
const ControlRegistrar ctl_barrier(cuda::KernelFault::kGdnMissingBarrier, "gdn_race", 4);
const ControlRegistrar ctl_trail(cuda::KernelFault::kGdnTrailStale, "gdn_trails");

}  // namespace
}  // namespace plumb::harness
