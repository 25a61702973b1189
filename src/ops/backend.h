// The op catalogue: every computation the model's forward pass needs, declared once as a Backend interface. The CPU
// backend (src/backends/cpu) is the reference every other backend is checked against; the forward pass
// (src/model/qwen3_next.cpp) is written against this interface only, so it runs unchanged on any backend.
//
// Conventions: tensors are contiguous and row-major; shapes below are written outermost first. Activations are F32 on
// every backend (the GPU's matrix products round them to BF16 as tensor-core operands). Weights [N, K] follow PyTorch's
// [out_features, in_features] and may be F32, BF16 or F16. Symbols: T tokens, H hidden size, V vocabulary, nk/nv
// key/value heads of Gated DeltaNet with head dims dk/dv, nq/nkv query/KV heads of full attention with head dim d, E
// experts, I expert intermediate size.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace plumb {

// How an RMSNorm applies its weight w: Qwen's zero-centred norms store w as an offset from 1.
enum class NormWeight {
  kZeroCentred,  // y = x / rms(x) * (1 + w)
  kPlain,        // y = x / rms(x) * w
};

// How gated_delta_rule (and attention, which follows the same rule) walks the sequence. Both compute the same
// function; tests hold them to each other, and speculative verification runs kRecurrent for a decode step's bits.
enum class GdnAlgorithm {
  kRecurrent,  // every token as a decode step computes it: the recurrent step, and attention's lone-token arithmetic
  kChunked,    // the chunk rule of gdn_pieces: the WY form for windows of two or more tokens, else the step
};
constexpr int64_t kGdnChunkSize = 64;

// A run of a sequence's new tokens that gated_delta_rule computes with one algorithm: rows [offset, offset + count)
// of the sequence's rows.
struct GdnPiece {
  int64_t offset = 0;
  int64_t count = 0;
  bool chunked = false;
};
struct GdnPieces {
  std::array<GdnPiece, 3> piece;  // at most: a one-token window, a run of chunked windows, a one-token window
  int size = 0;
};

// The chunk rule, which every backend follows, so that a sequence's bits depend on its positions alone and never on
// the calls that carry them. A sequence's positions fall into windows [64j, 64j + 64) (kGdnChunkSize). Under
// kChunked, the tokens of one window that a call carries are one chunk of the WY form when there are two or more of
// them, and go by the recurrent step when there is one; under kRecurrent every token goes by the recurrent step.
// Adjacent windows of one kind make one piece, computed in order, the state carried from one to the next. A prompt
// cut into calls at multiples of 64 hands every window to one call with the same tokens whatever the cuts, so its
// logits and states are bit-identical however it is cut (and whatever shares its calls).
inline GdnPieces gdn_pieces(int64_t past, int64_t count, GdnAlgorithm algorithm) {
  GdnPieces out;
  for (int64_t t = 0; t < count;) {
    const int64_t window = std::min(kGdnChunkSize - (past + t) % kGdnChunkSize, count - t);
    const bool chunked = algorithm == GdnAlgorithm::kChunked && window > 1;
    if (out.size > 0 && out.piece[out.size - 1].chunked == chunked) {
      out.piece[out.size - 1].count += window;
    } else {
      PLUMB_CHECK(out.size < static_cast<int>(out.piece.size()),
                  "gdn_pieces: past {} count {} makes more than {} pieces", past, count, out.piece.size());
      out.piece[out.size++] = {t, window, chunked};
    }
    t += window;
  }
  return out;
}

// One sequence's share of a batched call. Token-major tensors stack the new tokens of every sequence of the batch,
// sequence after sequence; this one owns rows [begin, begin + count) and its state already holds `past` tokens. A
// backend computes each sequence from its own rows and state alone, in an order that does not depend on the others:
// a sequence's results are bit-identical whatever shares its batch.
struct SequenceRows {
  int64_t begin = 0;  // first row
  int64_t count = 0;  // new tokens (rows)
  int64_t past = 0;   // tokens processed before these
};
using BatchRows = std::vector<SequenceRows>;

// Per sequence of a GDN op's call, the tensors that receive its state after each of its first tokens (see
// Backend::causal_conv1d_silu); empty when none are wanted.
using StateTrails = std::vector<std::vector<Tensor*>>;  // [sequences][tokens]

// Positions per KV-cache page. Equal to the attention kernels' fixed key block (kAttentionKeyBlock on the GPU), which
// walks keys in 64-position blocks from position 0: a page is a block, so where the pages lie cannot change a bit.
constexpr int64_t kKvPageSize = 64;

// One sequence's attention cache in one layer: keys (after norm and rotary embedding) and values in pages of a pool
// that other sequences share. Position p lives in page pages[p / kKvPageSize], at slot p % kKvPageSize of it; the
// pages need not be contiguous or in order, and the pool's other pages belong to other sequences or to nobody.
struct KvCache {
  Tensor k;                        // [pool pages, kKvPageSize, nkv, d] of the backend's kv_dtype(): the layer's pool
  Tensor v;                        // [pool pages, kKvPageSize, nkv, d] likewise
  std::span<const int32_t> pages;  // [table length]: the page table, page ids in position order (a view)
};

// The routed experts of one MoE layer, stacked by expert.
struct ExpertWeights {
  Tensor gate_up;  // [E, 2I, H]: expert e's gate projection in rows [0, I), its up projection in rows [I, 2I)
  Tensor down;     // [E, H, I]
};

// How sample_tokens draws one row's token.
struct TokenDraw {
  float temperature = 0.0f;  // 0: argmax
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  uint64_t step = 0;  // the draw's counter: u = uniform_f32_from_counter(seed, step) (core/counter_rng.h)
  // Host bits of the tokens the row may draw (structured output), [allowed_words(vocab)]: token t when bit t % 32 of
  // word t / 32 is set; the others draw as if their logit were -inf. Null: every token. At least one token below the
  // vocabulary must be allowed. Read during the sample_tokens call only.
  const uint32_t* allowed = nullptr;
};

// The 32-bit words of a TokenDraw::allowed row over `vocab` tokens.
constexpr int64_t allowed_words(int64_t vocab) {
  return (vocab + 31) / 32;
}
constexpr bool token_allowed(const uint32_t* allowed, int64_t id) {
  return allowed == nullptr || ((allowed[id / 32] >> (id % 32)) & 1u) != 0;
}

// A block's second output, scaled per row by sigmoid(gate) before it joins the residual stream: the MoE block's shared
// expert. out [R, D]; gate [R, 1].
struct GatedBranch {
  Tensor out;
  Tensor gate;
};

struct MemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// A forward pass recorded once and replayed for later batches of the same shape (Backend::record_step): on the GPU, a
// CUDA graph of every kernel the pass launched.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  // Kernels one replay runs.
  virtual int64_t kernels() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // The element type of attention caches: F32 on the CPU reference, BF16 on the GPU.
  virtual DType kv_dtype() const = 0;

  // Waits until every queued operation has finished (for timing; download() waits by itself).
  virtual void synchronize() = 0;
  // Kernels launched so far by this backend (0 where nothing is launched): a bench divides it by the steps it ran.
  virtual int64_t kernel_launches() const = 0;
  // Step graphs. record_step runs `step` (a forward pass) once, recording every kernel it launches and where its
  // small host tables go, and returns the recording; nullptr where the backend cannot record, in which case `step`
  // ran as usual. Its tensors live in memory the recording owns: a tensor it made (its logits) is valid until the next
  // recorded or replayed step. The step must not wait for the device (no download) nor change memory it did not
  // make in itself (no pool growth). max_kv_pages bounds the KV pages of any sequence of the step: page tables are
  // laid out at that stride, so their size does not depend on the sequences' lengths.
  virtual std::unique_ptr<StepGraph> record_step(int64_t max_kv_pages, const std::function<void()>& step) = 0;
  // Runs `step`'s host work alone (its checks and tables; no kernel), uploads its tables in one copy and replays
  // `graph`, whose kernels then compute the step. `step` must make the recorded step's calls with the same shapes
  // and table sizes (the same batch size, one token a sequence as recorded): a difference is an error, before any
  // kernel of the replay runs.
  virtual void replay_step(StepGraph& graph, const std::function<void()>& step) = 0;
  // Runs the ops `first` makes, then those `second` makes: two groups that neither read what the other writes nor
  // write what the other reads. A backend may run them at the same time; the bits of every result are the same either
  // way. The CUDA backend does while it records a step (record_step): `second` goes to a stream of its own that forks
  // from the step's stream before `first` and joins it after, so in the step's graph the two groups overlap (their
  // small kernels hide each other's latency); eagerly and on the CPU they run one after the other.
  virtual void concurrently(const std::function<void()>& first, const std::function<void()>& second) = 0;
  // Returns memory that no tensor holds any longer to the device, where the backend caches it for reuse (after the
  // weights are loaded and rearranged, so that what remains free can be measured and reserved).
  virtual void release_cached_memory() = 0;
  // The backend's memory as its device reports it: what is free now (after release_cached_memory, what no tensor
  // holds) and the total. The GPU's from the driver; the CPU's is the host's (MemAvailable and MemTotal).
  virtual MemoryInfo memory_info() const = 0;

  // Memory.
  virtual Tensor zeros(DType dtype, const Shape& shape) = 0;
  // Memory every element of which the caller writes before reading it (zeros on the CPU).
  virtual Tensor empty(DType dtype, const Shape& shape) = 0;
  virtual Tensor upload(const Tensor& host) = 0;          // the tensor in this backend's memory (F32 on the CPU)
  virtual Tensor download(const Tensor& t) = 0;           // a host copy
  virtual void copy(const Tensor& src, Tensor& dst) = 0;  // same element count and dtype
  // Several copies as one: dsts[i] becomes a copy of srcs[i] (same element count and dtype), as copy() makes them
  // one by one. No dst may overlap another pair's src or dst. A backend may make them at once: the GPU's device
  // copies go in one launch per 64 pairs (a recurrent state snapshot is 60 copies on Qwen3.5-35B-A3B).
  virtual void copy_all(const std::vector<Tensor>& srcs, std::vector<Tensor>& dsts) {
    PLUMB_CHECK(srcs.size() == dsts.size(), "copy_all: {} sources for {} destinations", srcs.size(), dsts.size());
    for (size_t i = 0; i < srcs.size(); ++i) copy(srcs[i], dsts[i]);
  }
  // Fills t (F32 or BF16) with lo + (hi - lo)·u, u uniform in [0, 1) from a counter-based hash of (seed, element
  // index): the same values on every backend, whatever the launch shape.
  virtual void random_uniform(Tensor& t, uint64_t seed, float lo, float hi) = 0;

  // out[t, :] = table[ids[t], :]. table [V, H]; out [T, H].
  virtual void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) = 0;
  // The same with the ids in this backend's memory (ids [T] I32), such as a previous step's draws: a step can follow
  // another without its ids visiting the host. An id outside [0, V) is an error where the backend can see it (the
  // CPU); the GPU, which cannot report from a kernel, fills that row with NaN, which every later op carries.
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  // y[t, n] = Σ_k x[t, k] · w[n, k]. x [T, K]; w [N, K]; y [T, N]. Row t of y depends on row t of x alone, in an
  // order that does not depend on T.
  virtual void linear(const Tensor& x, const Tensor& w, Tensor& y) = 0;
  // The products of one input with several weights: ys[j] = x · ws[j]ᵀ, each exactly as linear computes it. Where
  // consecutive weights are consecutive rows of one stored matrix (model/projection_stacks.h stacks the model's so), a
  // backend may run them as one product over the stack, which gives the same bits. x [T, K]; ws[j] [Nj, K]; ys[j] [T,
  // Nj].
  virtual void linear_parts(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) = 0;
  // Per row r of x [R, D]: y[r] = x[r] / sqrt(mean(x[r]²) + eps) ⊙ (1 + w or w). w [D].
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight kind, Tensor& y) = 0;
  // The residual step: x ← x + r, then y = rms_norm(x), each exactly as add and rms_norm compute it. x, r, y [R, D]
  // with y distinct from x and r.
  virtual void add_rms_norm(Tensor& x, const Tensor& r, const Tensor& w, float eps, NormWeight kind, Tensor& y) = 0;
  // The residual step of a block whose output has a second branch scaled per row by sigmoid(gate) (the MoE block's
  // shared expert): x ← x + (r + branch.out · sigmoid(branch.gate)), then y = rms_norm(x); each step exactly as
  // mul_sigmoid_rows, add and add_rms_norm compute it (r and branch.out are left as they were). x, r, y, branch.out
  // [R, D] with y distinct from x, r and branch.out; branch.gate [R, 1].
  virtual void add_gated_branch_rms_norm(Tensor& x, const Tensor& r, const GatedBranch& branch, const Tensor& w,
                                         float eps, NormWeight kind, Tensor& y) = 0;
  // Gated RMSNorm of Gated DeltaNet: y = x / sqrt(mean(x²) + eps) ⊙ w ⊙ SiLU(z), per row. x, z, y [R, D]; w [D].
  virtual void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) = 0;
  // dst [R, end - begin] = src[:, begin:end] for src [R, C].
  virtual void slice_columns(const Tensor& src, int64_t begin, int64_t end, Tensor& dst) = 0;

  // The GDN ops below may also leave each sequence's state after each of its first tokens, beside the final state
  // they rewrite: trails[i][t] (shaped as states[i], distinct from every other state of the call) receives sequence
  // i's state after its token t, for t < trails[i].size() < its token count. Verifying speculative drafts keeps them,
  // so that keeping the first j tokens of a verification is an index swap (to the state after token j - 1) rather
  // than a second run; the delta rule writes them under kRecurrent only. Empty: none; else one list a sequence.

  // Depthwise causal conv1d over time, then SiLU, per sequence: y[t, c] = SiLU(Σ_j w[c, j] · x[t - (K-1) + j, c]),
  // where inputs before the sequence's first new token come from its state. x, y [T, C]; w [C, K]; states[i]
  // [C, K-1] F32 holds sequence i's K-1 previous inputs (oldest first) and is updated to its last K-1 inputs.
  virtual void causal_conv1d_silu(const Tensor& x, const Tensor& w, const std::vector<Tensor*>& states,
                                  const BatchRows& batch, Tensor& y, const StateTrails& trails = {}) = 0;
  // The gated delta rule with its gates, per sequence. qkv [T, 2·nk·dk + nv·dv] holds each token's q (nk heads of
  // dk), k (likewise) and v (nv heads of dv), the conv output's column order. Gates per token and value head:
  // beta = sigmoid(b), g = -exp(A_log) · softplus(a + dt_bias); a, b [T, nv]; A_log, dt_bias [nv] F32. q and k are
  // L2-normalized per head (eps 1e-6 inside the root) and q scaled by dk^-1/2; value head h reads key head
  // h / (nv / nk). Per token: S ← exp(g)·S; S ← S + k (beta (v − Sᵀk))ᵀ; o = Sᵀq. states[i] [nv, dk, dv] F32 is
  // sequence i's S (in: before its first new token, out: after its last); o [T, nv, dv]. Each sequence's tokens go
  // in the pieces gdn_pieces(past, count, algorithm) gives (the chunk rule above): a piece's arithmetic depends on
  // its positions alone, so a prompt's bits do not depend on where its calls end at multiples of kGdnChunkSize.
  // states must be distinct tensors (two sequences of one call on one state would race).
  virtual void gated_delta_rule(const Tensor& qkv, int64_t key_heads, const Tensor& a, const Tensor& b,
                                const Tensor& A_log, const Tensor& dt_bias, const std::vector<Tensor*>& states,
                                const BatchRows& batch, Tensor& o, GdnAlgorithm algorithm,
                                const StateTrails& trails = {}) = 0;

  // Rotate-half rotary embedding on the first rotary_dim dims of each head, in place. x [T, heads, d]; positions [T].
  virtual void rotary_embedding(Tensor& x, const std::vector<int64_t>& positions, int64_t rotary_dim, double theta) = 0;
  // Causal grouped-query attention, per sequence: writes its new keys and values k, v [T, nkv, d] (F32) into its
  // cache at positions [past, past + count) through its page table, then query t of it, at position past + t, attends
  // to positions [0, past + t]. Scores scaled by d^-1/2. q [T, nq, d]; caches[i] is sequence i's, its page table
  // covering past + count positions (check_kv_cache); o [T, nq, d]. Nothing outside the written positions changes;
  // sequences of one call must not share a page. A backend may compute a token alone in its 64-aligned window (a
  // decode step) otherwise than tokens that share one (the GPU folds a lone token's key segments): `rule` is the chunk
  // rule of gdn_pieces, and with kRecurrent every token takes a lone token's arithmetic, so T tokens in one call are
  // bit-identical to T calls of one (what verifying speculative drafts needs).
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<KvCache*>& caches,
                         const BatchRows& batch, Tensor& o, GdnAlgorithm rule) = 0;

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
  // y[t] = Σ_j weights[t, j] · down_e(SiLU(gate_e x[t]) ⊙ up_e x[t]) with e = expert_ids[t, j], summed in j order.
  // x [T, H]; expert_ids, expert_weights [T, top_k]; y [T, H]. Row t of y depends on row t of the inputs alone.
  virtual void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                           const ExpertWeights& experts, Tensor& y) = 0;

  // Per row r of logits [R, V]: ids[r] (I32) is the token draws[r] picks. Temperature 0: the argmax, ties to the
  // lowest id. Otherwise p = softmax(logits[r] / temperature); keep the top_k most likely tokens (all when 0; ties
  // to the lower id), then the fewest of those, most likely first, whose probabilities reach top_p of the kept
  // mass; return the first kept token, in that order, at which the cumulative kept probability exceeds u times
  // their total. A draw with `allowed` bits sees -inf in place of every logit whose token it does not allow.
  virtual void sample_tokens(const Tensor& logits, const std::vector<TokenDraw>& draws, Tensor& ids) = 0;
};

}  // namespace plumb
