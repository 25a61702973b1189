// Harness cases of the attention family: rotary_embedding (per row) and causal grouped-query attention (per
// sequence, over paged caches: BF16 pools on the GPU, F32 ones on the CPU). Bounds per docs/kernel-contract.md
// §Attention.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backends/cuda/kernels/attention.h"
#include "core/parallel.h"
#include "op_harness.h"

namespace plumb::harness {
namespace {

constexpr int64_t kRowCounts[] = {1, 63, 64, 65, 1000};

void rotary_case(Context& c) {
  const int64_t heads = 3;
  for (int64_t d : {int64_t{16}, int64_t{24}, int64_t{128}, int64_t{256}}) {
    for (int64_t rotary_dim : {d, d / 4 / 2 * 2}) {
      for (double theta : {1e4, 1e7}) {
        for (int64_t T : kRowCounts) {
          const Tensor x = normal(c.rng, {T, heads, d});
          std::vector<int64_t> positions(static_cast<size_t>(T));
          std::uniform_int_distribution<int64_t> pos(0, 5000);
          for (int64_t& p : positions) p = pos(c.rng);
          positions[0] = 0;
          // A rotated pair (a, b) errs by (|a| + |b|)·|Δangle| plus a few roundings; the angle pos·θ^(-2i/r) by a few
          // ulps of itself (the frequency's pow or exp2 and the product) plus sin/cos's own error. Dims past
          // rotary_dim are untouched: exact.
          const int64_t half = rotary_dim / 2;
          std::vector<double> bound(static_cast<size_t>(T * heads * d), 0.0);
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < heads; ++h)
              for (int64_t i = 0; i < rotary_dim; ++i) {
                const int64_t f = i % half;
                const double angle = static_cast<double>(positions[t]) *
                                     std::pow(theta, -2.0 * static_cast<double>(f) / static_cast<double>(rotary_dim));
                const float* v = x.f32() + (t * heads + h) * d;
                const double ab = std::fabs(v[f]) + std::fabs(v[f + half]);
                bound[(t * heads + h) * d + i] = ab * (16 * kF32Unit * (angle + 1.0) + 2 * kTranscendental);
              }
          auto run = [&](Backend& be, int64_t begin, int64_t end) {
            Tensor y = fresh(be, x.rows(begin, end));
            be.rotary_embedding(y, std::vector<int64_t>(positions.begin() + begin, positions.begin() + end), rotary_dim,
                                theta);
            return fetch_f32(be, y);
          };
          judge_per_row(c,
                        "rotary_embedding d=" + std::to_string(d) + " rotary=" + std::to_string(rotary_dim) +
                            " theta=" + std::to_string(static_cast<int64_t>(theta)) + " T=" + std::to_string(T),
                        T, bound, run);
        }
      }
    }
  }
}

struct AttentionShape {
  int64_t nq, nkv, d;
};

// Positions of slack past each sequence's end at least (its cache runs on to the end of its last page): a kernel
// reading one key too far reads a real (random) key.
constexpr int64_t kCacheSlack = 8;

// Page tables for sequences of counts[i] pages in one pool of 1 + Σ counts pages. Pool pages 1.. are handed out
// round-robin across the sequences (page j of each, then page j + 1) in a shuffled order, so every sequence's pages
// are out of order and interleaved with the others'. Page 0 is nobody's: no table maps block 0 to page 0, so a
// kernel that reads block j from page j (kAttentionPageTableIgnored) reads a wrong page for every sequence, and
// reads within the pool (page j <= Σ counts).
std::vector<std::vector<int32_t>> shuffled_page_tables(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  std::vector<int32_t> ids(static_cast<size_t>(total));
  std::iota(ids.begin(), ids.end(), 1);
  // The layout is a function of the page counts, so a rerun of the same batch repeats it, and a sequence of a batch
  // run alone gets another layout than in the batch.
  std::mt19937_64 rng(static_cast<uint64_t>(total) * 1000003u + counts.size());
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(counts.size());
  size_t next = 0;
  for (int64_t j = 0; next < ids.size(); ++j)
    for (size_t i = 0; i < counts.size(); ++i)
      if (j < counts[i]) tables[i].push_back(ids[next++]);
  return tables;
}

// The op: caches are states (k then v per sequence), each a sequence's whole pages by position [pages · kKvPageSize,
// nkv, d], held as F32 on the host with values BF16 represents exactly, so both backends start from identical caches.
// They go into one pool in the pages of shuffled_page_tables (uploaded as BF16 to the GPU), page 0 holding random
// keys of nobody; after the call each sequence's pages are read back in table order, so the states compare position
// by position whatever the layout, every page a sequence owns included.
SequenceOutputs run_attention(Backend& be, const SeqInputs& in) {
  const Tensor& q = in.rows[0];  // [T, nq, d]
  const int64_t nkv = in.rows[1].dim(1), d = in.rows[1].dim(2), page_elements = kKvPageSize * nkv * d;
  std::vector<int64_t> counts;
  for (size_t i = 0; i < in.batch.size(); ++i) counts.push_back(in.states[2 * i].dim(0) / kKvPageSize);
  const std::vector<std::vector<int32_t>> tables = shuffled_page_tables(counts);
  int64_t pool_pages = 1;
  for (int64_t n : counts) pool_pages += n;
  std::mt19937_64 guard_rng(static_cast<uint64_t>(pool_pages));
  const Tensor guard = bf16_exact(normal(guard_rng, {1, kKvPageSize, nkv, d}));  // page 0 of both pools
  std::vector<Tensor> pools;  // k, v [pool pages, kKvPageSize, nkv, d] of be.kv_dtype()
  for (size_t kv = 0; kv < 2; ++kv) {
    Tensor host = Tensor::zeros(DType::kF32, {pool_pages, kKvPageSize, nkv, d});
    std::memcpy(host.f32(), guard.f32(), guard.nbytes());
    for (size_t i = 0; i < tables.size(); ++i)
      for (size_t j = 0; j < tables[i].size(); ++j)
        std::memcpy(host.f32() + tables[i][j] * page_elements, in.states[2 * i + kv].f32() + j * page_elements,
                    static_cast<size_t>(page_elements) * sizeof(float));
    pools.push_back(fresh(be, to_dtype(host, be.kv_dtype())));
  }
  std::vector<KvCache> caches;
  for (const std::vector<int32_t>& table : tables) caches.push_back({pools[0], pools[1], table});
  std::vector<KvCache*> cache_ptrs;
  for (KvCache& kv : caches) cache_ptrs.push_back(&kv);
  Tensor o = poisoned(be, DType::kF32, q.shape());
  be.attention(be.upload(q), be.upload(in.rows[1]), be.upload(in.rows[2]), cache_ptrs, in.batch, o,
               GdnAlgorithm::kChunked);
  SequenceOutputs out{fetch_f32(be, o), {}};
  const Tensor host_pools[2] = {fetch_f32(be, pools[0]), fetch_f32(be, pools[1])};
  // A write to page 0, which no sequence owns, is a wrong output like any other: it turns the outputs to NaN, which
  // every comparison rejects (a throw would stop a planted control before its verdict).
  for (const Tensor& pool : host_pools)
    if (std::memcmp(pool.f32(), guard.f32(), guard.nbytes()) != 0)
      std::fill(out.rows.f32(), out.rows.f32() + out.rows.numel(), std::numeric_limits<float>::quiet_NaN());
  for (size_t i = 0; i < tables.size(); ++i)
    for (const Tensor& pool : host_pools) {
      Tensor cache = Tensor::zeros(DType::kF32, in.states[2 * i].shape());  // [pages · kKvPageSize, nkv, d]
      for (size_t j = 0; j < tables[i].size(); ++j)
        std::memcpy(cache.f32() + j * page_elements, pool.f32() + tables[i][j] * page_elements,
                    static_cast<size_t>(page_elements) * sizeof(float));
      out.states.push_back(cache);
    }
  return out;
}

// Inputs ~ N(0, 1) (q and k come out of RMS norms; v of a projection); cache entries likewise, rounded to BF16.
SeqInputs attention_inputs(std::mt19937_64& rng, const AttentionShape& s, const BatchRows& batch) {
  const int64_t T = batch_tokens(batch);
  SeqInputs in{
      {normal(rng, {T, s.nq, s.d}), normal(rng, {T, s.nkv, s.d}), normal(rng, {T, s.nkv, s.d})}, {}, {}, batch, 2};
  for (const SequenceRows& seq : batch) {
    const int64_t pages = (seq.past + seq.count + kCacheSlack + kKvPageSize - 1) / kKvPageSize;
    for (int kv = 0; kv < 2; ++kv) in.states.push_back(bf16_exact(normal(rng, {pages * kKvPageSize, s.nkv, s.d})));
  }
  return in;
}

// The bound of docs/kernel-contract.md §Attention for each output element, from the reference softmax in double:
// scores err by σ_j = scale·(2·r_bf16 + (d + 8)·2^-23)·Σ_c |q_c k_jc| (q and k rounded to BF16, F32 dot); to first
// order that moves o_c by Σ_j p_j σ_j |v_jc − o_c| (×1.1 for second order), and the BF16 V and P operands, the
// exponentials and the F32 sums over n keys add (2·r_bf16 + 4·r_exp + 2(n + 64)·2^-24)·Σ_j p_j |v_jc|. The fold of a
// lone token's S segments (kernels/attention.h) adds, per segment, two exponentials and three F32 roundings of the
// output and the sum: (2·r_exp + 6·2^-24)·S more of the same mass (given to every row: under 2^-13 at S = 32, against
// the BF16 operands' 2^-7).
std::vector<double> attention_bound(const SeqInputs& in, const AttentionShape& s) {
  const int64_t T = batch_tokens(in.batch), d = s.d, nq = s.nq, nkv = s.nkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> bound(static_cast<size_t>(T * nq * d));
  for (size_t si = 0; si < in.batch.size(); ++si) {
    const SequenceRows seq = in.batch[si];
    // Keys and values by position: the cache below past, this call's inputs from past on.
    auto key = [&](int64_t pos, int64_t g, int kv) -> const float* {
      if (pos < seq.past) return in.states[2 * si + kv].f32() + (pos * nkv + g) * d;
      return in.rows[1 + kv].f32() + ((seq.begin + pos - seq.past) * nkv + g) * d;
    };
    parallel_for(seq.count * nq, 4, [&](int64_t lo, int64_t hi) {
      std::vector<double> score, sigma, o(d);
      for (int64_t idx = lo; idx < hi; ++idx) {
        const int64_t t = idx / nq, h = idx % nq, g = h / (nq / nkv), n = seq.past + t + 1;
        const float* qv = in.rows[0].f32() + ((seq.begin + t) * nq + h) * d;
        score.assign(n, 0.0);
        sigma.assign(n, 0.0);
        double max_score = -INFINITY, total = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float* kj = key(j, g, 0);
          double dot = 0, abs_dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += qv[c] * static_cast<double>(kj[c]), abs_dot += std::fabs(qv[c] * kj[c]);
          score[j] = dot * scale;
          sigma[j] = scale * (2 * kBf16Operand + static_cast<double>(d + 8) * 2 * kF32Unit) * abs_dot;
          max_score = std::max(max_score, score[j]);
        }
        for (int64_t j = 0; j < n; ++j) total += score[j] = std::exp(score[j] - max_score);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t c = 0; c < d; ++c) o[c] += score[j] / total * key(j, g, 1)[c];
        const auto segments = static_cast<double>(cuda::attention_segments((n - 1) / kKvPageSize + 1));
        const double rel = 2 * kBf16Operand + 4 * kTranscendental + 2.0 * static_cast<double>(n + 64) * kF32Unit +
                           (2 * kTranscendental + 6 * kF32Unit) * segments;
        for (int64_t c = 0; c < d; ++c) {
          double shift = 0, mass = 0;
          for (int64_t j = 0; j < n; ++j) {
            const double p = score[j] / total, vc = key(j, g, 1)[c];
            shift += p * sigma[j] * std::fabs(vc - o[c]);
            mass += p * std::fabs(vc);
          }
          bound[((seq.begin + t) * nq + h) * d + c] = 1.1 * shift + rel * mass;
        }
      }
    });
  }
  return bound;
}

std::string attention_label(const AttentionShape& s, const BatchRows& batch) {
  return "attention nq=" + std::to_string(s.nq) + " nkv=" + std::to_string(s.nkv) + " d=" + std::to_string(s.d) + " " +
         batch_label(batch);
}

// After the call, a sequence's GPU pages hold its new keys and values rounded to BF16 at [past, past + count) and
// are unchanged elsewhere (including the slack to the end of its last page).
void check_caches(Verdict& v, const std::string& what, const SeqInputs& in, const SequenceOutputs& got) {
  for (size_t si = 0; si < in.batch.size(); ++si) {
    const SequenceRows seq = in.batch[si];
    for (int kv = 0; kv < 2; ++kv) {
      Tensor expected = clone(in.states[2 * si + kv]);
      const Tensor fresh_rows = bf16_exact(in.rows[1 + kv].rows(seq.begin, seq.begin + seq.count));
      std::memcpy(expected.rows(seq.past, seq.past + seq.count).data(), fresh_rows.data(), fresh_rows.nbytes());
      v.same_bits(what + " sequence " + std::to_string(si) + (kv ? " v" : " k") + " cache", got.states[2 * si + kv],
                  expected);
    }
  }
}

void attention_judge(Context& c, const AttentionShape& s, const SeqInputs& in, const std::string& what) {
  const SequenceOutputs got = judge_sequences(c, what, in, run_attention, attention_bound(in, s), {});
  check_caches(c.verdict, what, in, got);
}

void attention_run(Context& c, const AttentionShape& s, const BatchRows& batch) {
  attention_judge(c, s, attention_inputs(c.rng, s, batch), attention_label(s, batch));
}

// A 192-token prompt prefilled as 64 + 128 tokens (the cache carried between the calls) must equal one 192-token
// call bit for bit.
void attention_split(Context& c, const AttentionShape& s) {
  const SeqInputs whole = attention_inputs(c.rng, s, {{0, 192, 0}});
  judge_split(c, attention_label(s, whole.batch) + " (states: k, v cache)", whole, run_attention);
}

void attention_small_case(Context& c) {
  for (int64_t d : {int64_t{16}, int64_t{24}})
    for (const BatchRows& batch : standard_batches(c.rng)) attention_run(c, {6, 2, d}, batch);
}

void attention_large_case(Context& c) {
  for (int64_t d : {int64_t{128}, int64_t{256}}) {
    const AttentionShape s{8, 2, d};
    attention_run(c, s, {{0, 1, 700}});
    attention_run(c, s, {{0, 1000, 37}});
    attention_run(c, s, {{0, 1, 5}, {1, 65, 64}, {66, 130, 0}});
    attention_run(c, s, ragged_batch(c.rng, 64, 20, 300));
    attention_split(c, s);
  }
}

// Long contexts. Tokens alone in their 64-position window of the call (split tiles: decode rows, and a chunk's first
// and last token when the cuts leave them alone) fold up to kAttentionMaxSegments segments computed by several CTAs:
// a decode row over 9000 positions (32 segments over 141 blocks, which do not divide evenly), a call of 66 tokens
// from position 2047 (a lone token at each end, a whole window between them), whole tiles, a mixed batch and eight
// decode rows, against the reference (and each sequence alone against the batch); then cuts at window boundaries and
// around lone tokens must give one call's bits.
void attention_segments_case(Context& c) {
  for (const AttentionShape s : {AttentionShape{8, 2, 128}, AttentionShape{16, 2, 256}}) {
    attention_run(c, s, {{0, 1, 9000}});
    // Random keys spread a row's attention thin, so its last segment (its newest keys) weighs as little as any other:
    // here each KV head's new key is 4x the first query of its group, which then attends mostly to its own token, in
    // the last segment.
    SeqInputs self = attention_inputs(c.rng, s, {{0, 1, 9000}});
    for (int64_t g = 0; g < s.nkv; ++g)
      for (int64_t i = 0; i < s.d; ++i)
        self.rows[1].f32()[g * s.d + i] = 4.0f * self.rows[0].f32()[g * (s.nq / s.nkv) * s.d + i];
    attention_judge(c, s, self, attention_label(s, self.batch) + ", a query attending to its own key");
    attention_run(c, s, {{0, 66, 2047}});
    attention_run(c, s, {{0, 40, 2030}});
    attention_run(c, s, {{0, 1, 3000}, {1, 200, 1000}, {201, 3, 700}});
    // Eight decode rows: in the batch each lone token gets an eighth of the CTAs it gets alone.
    attention_run(
        c, s,
        {{0, 1, 9000}, {1, 1, 5000}, {2, 1, 3000}, {3, 1, 700}, {4, 1, 100}, {5, 1, 8200}, {6, 1, 4100}, {7, 1, 1300}});
    const std::string states = " (states: k, v cache)";
    for (const auto& [whole, cuts] : std::vector<std::pair<SequenceRows, std::vector<int64_t>>>{
             {{0, 2100, 0}, {1536, 64, 500}}, {{0, 66, 2047}, {1, 64, 1}}, {{0, 130, 8255}, {1, 128, 1}}}) {
      const SeqInputs in = attention_inputs(c.rng, s, {whole});
      judge_chunks(c, attention_label(s, in.batch) + states, in, run_attention, cuts);
    }
  }
}

// Sized for a race to show: long prefill, long pasts, many heads.
void attention_race_case(Context& c) {
  const AttentionShape s{16, 2, 256};
  attention_run(c, s, {{0, 1000, 0}, {1000, 1, 1200}, {1001, 300, 64}});
}

const CaseRegistrar reg_rotary("rotary_embedding", rotary_case);
const CaseRegistrar reg_attn_small("attention_small", attention_small_case);
const CaseRegistrar reg_attn_large("attention_large", attention_large_case);
const CaseRegistrar reg_attn_segments("attention_segments", attention_segments_case);
const CaseRegistrar reg_attn_race("attention_race", attention_race_case);

const ControlRegistrar ctl_rotary(cuda::KernelFault::kRotaryWrongPairing, "rotary_embedding");
const ControlRegistrar ctl_causal(cuda::KernelFault::kAttentionCausalOffByOne, "attention_small");
const ControlRegistrar ctl_barrier(cuda::KernelFault::kAttentionMissingBarrier, "attention_race", 4);
const ControlRegistrar ctl_pages(cuda::KernelFault::kAttentionPageTableIgnored, "attention_small");
const ControlRegistrar ctl_segments(cuda::KernelFault::kAttentionSegmentsDropLast, "attention_segments");
const ControlRegistrar ctl_write_pages(cuda::KernelFault::kKvWriteIgnoresPageTable, "attention_small");

}  // namespace
}  // namespace plumb::harness
