// Kernels of sample.h: the MoE router (one thread block per token) and the token sampler (a thread-block cluster
// per row).
//
// The sampler follows CpuBackend::sample_tokens (cpu_sample.cpp). With s = (l - max l) · (1 / T) in F32, tokens rank
// by s, highest first, equal s to the lower id, and weigh e = exp(s) (softmax numerators: dividing by their sum
// would scale both sides of every comparison below alike, so neither backend does). The kept tokens are the first
// top_k; the nucleus is the shortest prefix of them whose weight reaches top_p times theirs; the pick is the first
// nucleus token at which the running weight exceeds u times the nucleus weight.
//
// The GPU finds each of these three positions (by count, by weight, by weight) without sorting, by a radix descent
// on the rank key k = bits(|s|), which orders tokens like s (smaller key, likelier token). Level 0 histograms every
// token by k >> 22 (512 bins, once per row); levels 1 and 2 histogram the tokens of the chosen bin by the next 11
// bits each; a bin holds its tokens' count, weight and lowest id. A prefix scan over the bins finds the one where
// the condition is first met; within a fully resolved key the tied tokens go in id order. Weights are 64-bit fixed
// point, floor(e · 2^shift) with shift = min(53, 63 - bit_width(vocab)), so every sum is an exact integer, the same
// in any order, and a histogram may be built with integer atomics.
//
// A row is spread over a cluster of up to 16 blocks (one multiprocessor each): every block sweeps its own run of
// consecutive ids into its own shared-memory histograms, and the row's histogram is their sum: each block sums its
// own share of the bins over the cluster through distributed shared memory, and the block whose share holds a
// boundary hands it to every block (find_boundary). Integer sums make that merge exact, so the ids drawn do not
// depend on the cluster's size, and every block returns the same boundaries.
//
// What the GPU sums differently: the CPU reference adds std::exp(s) in double in rank order; the GPU adds expf(s)
// (within 2 ulp of it) truncated to 2^-shift. Ranks, the kept set and tie order are identical on both; a top-p cut
// or a pick can differ only where top_p · kept weight or u · nucleus weight lies within about 1e-7 (relative) of a
// cumulative weight.
#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/kernels/device_limits.h"
#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/launch_choices.h"
#include "backends/cuda/kernels/sample.h"

namespace plumb::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr unsigned kFullMask = 0xffffffffu;
using u64 = unsigned long long;  // the type integer atomics and shuffles take

// ---- router ----------------------------------------------------------------------------------------------------

constexpr int kRouteThreads = 128;
constexpr int kRouteWarps = kRouteThreads / 32;

// Whether expert a (probability pa) ranks before expert b: the higher probability, equal ones to the lower id (to
// the higher id in the planted control).
template <KernelFault kFault>
__device__ __forceinline__ bool ranks_before(float pa, int32_t a, float pb, int32_t b) {
  if (pa != pb) return pa > pb;
  return kFault == KernelFault::kRouteTiesToHigher ? a > b : a < b;
}

// Block t routes token t. Thread j owns experts j, j + 128, ...: it computes their e^(l - max) and sums them in that
// order; a xor-shuffle tree and the four warps' sums, (w0 + w1) + (w2 + w3), give the softmax denominator, in an
// order fixed by the expert count. Then top_k rounds of a block argmax (ties to the lower id); each round's winner
// is set to -1 by its owner so later rounds pass it over. Renormalization sums the kept weights in rank order, as
// the CPU reference does.
template <KernelFault kFault>
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(MoeRouteParams p) {
  wait_for_prior_grid();
  extern __shared__ float route_shared[];
  float* prob = route_shared;                // [experts]
  float* chosen = route_shared + p.experts;  // [top_k], thread 0's
  __shared__ float warp_max[kRouteWarps], warp_sum[kRouteWarps];
  __shared__ float round_p[2][kRouteWarps];  // double-buffered by round, so one barrier per round suffices
  __shared__ int32_t round_id[2][kRouteWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t E = p.experts, K = p.top_k;
  const int64_t t = blockIdx.x;
  const float* logits = p.logits + t * E;  // [E]

  float max_logit = -INFINITY;
  for (int32_t e = threadIdx.x; e < E; e += kRouteThreads) {
    prob[e] = logits[e];
    max_logit = fmaxf(max_logit, prob[e]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    max_logit = fmaxf(max_logit, __shfl_xor_sync(kFullMask, max_logit, offset));
  if (lane == 0) warp_max[warp] = max_logit;
  __syncthreads();
  max_logit = fmaxf(fmaxf(warp_max[0], warp_max[1]), fmaxf(warp_max[2], warp_max[3]));

  float sum = 0.0f;
  for (int32_t e = threadIdx.x; e < E; e += kRouteThreads) {
    prob[e] = expf(__fsub_rn(prob[e], max_logit));
    sum = __fadd_rn(sum, prob[e]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum = __fadd_rn(sum, __shfl_xor_sync(kFullMask, sum, offset));
  if (lane == 0) warp_sum[warp] = sum;
  __syncthreads();
  sum = __fadd_rn(__fadd_rn(warp_sum[0], warp_sum[1]), __fadd_rn(warp_sum[2], warp_sum[3]));
  for (int32_t e = threadIdx.x; e < E; e += kRouteThreads) prob[e] = __fdiv_rn(prob[e], sum);

  for (int32_t j = 0; j < K; ++j) {
    // Below every probability and every passed-over expert (-1).
    float best_p = -2.0f;
    int32_t best = E;
    for (int32_t e = threadIdx.x; e < E; e += kRouteThreads)
      if (ranks_before<kFault>(prob[e], e, best_p, best)) best_p = prob[e], best = e;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other_p = __shfl_xor_sync(kFullMask, best_p, offset);
      const int32_t other = __shfl_xor_sync(kFullMask, best, offset);
      if (ranks_before<kFault>(other_p, other, best_p, best)) best_p = other_p, best = other;
    }
    if (lane == 0) round_p[j & 1][warp] = best_p, round_id[j & 1][warp] = best;
    __syncthreads();
    best_p = round_p[j & 1][0], best = round_id[j & 1][0];
    for (int w = 1; w < kRouteWarps; ++w)
      if (ranks_before<kFault>(round_p[j & 1][w], round_id[j & 1][w], best_p, best))
        best_p = round_p[j & 1][w], best = round_id[j & 1][w];
    // Only NaN logits leave no winner; an id in range keeps the expert kernels in bounds even then.
    if (best >= E) best = 0;
    if (best % kRouteThreads == static_cast<int32_t>(threadIdx.x)) prob[best] = -1.0f;
    if (threadIdx.x == 0) {
      chosen[j] = best_p;
      p.expert_ids[t * K + j] = best;
    }
  }

  if (threadIdx.x == 0) {
    float kept = 0.0f;
    for (int32_t j = 0; j < K; ++j) kept = __fadd_rn(kept, chosen[j]);
    for (int32_t j = 0; j < K; ++j)
      p.expert_weights[t * K + j] = p.renormalize ? __fdiv_rn(chosen[j], kept) : chosen[j];
  }
}

// ---- sampler ---------------------------------------------------------------------------------------------------

constexpr int kSampleThreads = 1024;
constexpr int kSampleWarps = kSampleThreads / 32;
constexpr int kUnroll = 4;        // 16-byte loads in flight per lane while sweeping a row
constexpr int kLevel0Shift = 22;  // level 0 digit: key >> 22
constexpr int kLevelBits = 11;    // levels 1 and 2: the next 11 bits each
constexpr int kLevel0Bins = 1 << (31 - kLevel0Shift);
constexpr int kLevelBins = 1 << kLevelBits;
constexpr uint32_t kNoId = 0xffffffffu;

// A run of tokens: how many, and their fixed-point weight.
struct Tally {
  uint32_t count;
  u64 mass;
};
__device__ __forceinline__ Tally operator+(Tally a, Tally b) {
  return {a.count + b.count, a.mass + b.mass};
}
__device__ __forceinline__ Tally operator-(Tally a, Tally b) {
  return {a.count - b.count, a.mass - b.mass};
}

// One block's histogram of its part of the row; the row's is the sum over the cluster's blocks (merged_bin).
template <int kBins>
struct Histogram {
  u64 mass[kBins];
  uint32_t count[kBins];
  uint32_t first_id[kBins];  // the lowest id in the bin
};

// The first bin (in rank order) at which a condition is met, the tally of all tokens ranked before that bin, and
// the bin's own token count and lowest id, summed over the cluster.
struct Boundary {
  int bin;
  Tally before;
  uint32_t count;
  uint32_t first_id;
};

struct SampleShared {
  Histogram<kLevel0Bins> level0;  // this block's tokens by key >> 22, built once per row
  Histogram<kLevelBins> level;    // this block's tokens of one bin of the level above, by the next 11 bits
  Tally warp_tally[kSampleWarps];
  float warp_value[kSampleWarps];
  uint32_t warp_id[kSampleWarps];
  Boundary boundary;
  Tally total;
  Tally share_total;    // this block's share of the bins summed over the cluster (merge_share)
  int owner;            // the block whose share holds the boundary, -1 if none (find_boundary)
  Tally owner_base;     // the tally ranked before that share
  float block_value;    // this block's largest logit (row_max, row_argmax), read by the cluster
  uint32_t block_id;    // and its id (row_argmax)
  uint32_t block_tied;  // the tied tokens in this block's part (nth_tied_id)
  uint32_t found_id;    // written by the block that finds it into every block of the cluster
  float row_value;      // the row's largest logit, for every thread of the block
};

// One row of logits, the part of it this block sweeps, and how its tokens are ranked and weighed.
struct Row {
  const float* logits;  // [vocab]
  int64_t vocab;
  int64_t first, last;  // this block's part: ids [first, last), first a multiple of 4
  bool vectorized;      // vocab % 4 == 0 and 16-byte aligned rows
  float max_logit;
  float inv_temperature;
  float mass_scale;         // 2^shift
  const uint32_t* allowed;  // [allowed_words(vocab)] the tokens the row may draw, bit t % 32 of word t / 32; null: all

  // The logit token i draws with: -inf where the row does not allow it.
  __device__ float logit(int64_t i, float raw) const {
    return allowed == nullptr || ((allowed[i >> 5] >> (i & 31)) & 1u) != 0 ? raw : -INFINITY;
  }
  __device__ float at(int64_t i) const { return logit(i, logits[i]); }

  // The rank key bits(|s|) of s = (l - max) · (1 / T) <= 0, rounded as the CPU reference rounds it.
  __device__ uint32_t key(float logit) const {
    return __float_as_uint(__fmul_rn(__fsub_rn(logit, max_logit), inv_temperature)) & 0x7fffffffu;
  }
  // floor(exp(s) · 2^shift) for the s of a key; at most 2^53.
  __device__ u64 mass(uint32_t key) const {
    return static_cast<u64>(__fmul_rn(expf(-__uint_as_float(key)), mass_scale));
  }
};

// The same shared variable of another block of the cluster.
template <typename T>
__device__ __forceinline__ T* in_block(T* own, unsigned rank) {
  return cg::this_cluster().map_shared_rank(own, rank);
}

// Calls fn(id, logit, valid) once with valid = true for every token of the block's part. The loops run the same
// number of times in every lane of a warp (valid = false pads the last round), so fn may use warp collectives.
template <typename Fn>
__device__ __forceinline__ void for_each_logit(const Row& row, Fn&& fn) {
  const int lane = threadIdx.x % 32;
  const int64_t warp_first = threadIdx.x - lane;
  if (row.vectorized) {
    const int64_t end = row.last / 4;
    const float4* logits4 = reinterpret_cast<const float4*>(row.logits);
    for (int64_t base = row.first / 4 + warp_first; base < end; base += kSampleThreads * kUnroll) {
      float4 l[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t v = base + u * kSampleThreads + lane;
        l[u] = v < end ? logits4[v] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t v = base + u * kSampleThreads + lane;
        const bool valid = v < end;
        // Tokens 4v .. 4v + 3 are bits 4(v % 8) .. 4(v % 8) + 3 of word v / 8.
        const uint32_t keep = row.allowed != nullptr && valid ? row.allowed[v >> 3] >> ((v & 7) * 4) : 0xfu;
        fn(4 * v, keep & 1u ? l[u].x : -INFINITY, valid);
        fn(4 * v + 1, keep & 2u ? l[u].y : -INFINITY, valid);
        fn(4 * v + 2, keep & 4u ? l[u].z : -INFINITY, valid);
        fn(4 * v + 3, keep & 8u ? l[u].w : -INFINITY, valid);
      }
    }
  } else {
    for (int64_t base = row.first + warp_first; base < row.last; base += kSampleThreads) {
      const int64_t i = base + lane;
      const bool valid = i < row.last;
      fn(i, valid ? row.at(i) : 0.0f, valid);
    }
  }
}

// The larger logit, equal ones to the lower id.
__device__ __forceinline__ bool beats(float a, uint32_t a_id, float b, uint32_t b_id) {
  return a > b || (a == b && a_id < b_id);
}

// The block's best (logit, id) of its part into s.block_value / s.block_id, by `better`, a total order or a max;
// exact in any order. Every thread calls it; the cluster reads the result after its next cluster.sync().
template <typename Better>
__device__ void block_best(float best, uint32_t best_id, SampleShared& s, Better&& better) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullMask, best, offset);
    const uint32_t other_id = __shfl_xor_sync(kFullMask, best_id, offset);
    if (better(other, other_id, best, best_id)) best = other, best_id = other_id;
  }
  if (lane == 0) s.warp_value[warp] = best, s.warp_id[warp] = best_id;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kSampleWarps; ++w)
      if (better(s.warp_value[w], s.warp_id[w], best, best_id)) best = s.warp_value[w], best_id = s.warp_id[w];
    s.block_value = best, s.block_id = best_id;
  }
}

// The cluster's best of the blocks' (block_value, block_id), in thread 0 of every block.
template <typename Better>
__device__ void cluster_best(float& best, uint32_t& best_id, SampleShared& s, Better&& better) {
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's block_value is written
  if (threadIdx.x == 0) {
    best = s.block_value, best_id = s.block_id;
    for (unsigned r = 0; r < cluster.num_blocks(); ++r) {
      const float value = *in_block(&s.block_value, r);
      const uint32_t id = *in_block(&s.block_id, r);
      if (better(value, id, best, best_id)) best = value, best_id = id;
    }
  }
}

// The greedy pick: the row's argmax, exact in any order since beats() is a total order on (logit, id); valid in
// thread 0.
__device__ uint32_t row_argmax(const Row& row, SampleShared& s) {
  float best = -INFINITY;
  uint32_t best_id = kNoId;
  for_each_logit(row, [&](int64_t i, float l, bool valid) {
    if (valid && beats(l, static_cast<uint32_t>(i), best, best_id)) best = l, best_id = static_cast<uint32_t>(i);
  });
  const auto by_logit = [](float a, uint32_t a_id, float b, uint32_t b_id) { return beats(a, a_id, b, b_id); };
  block_best(best, best_id, s, by_logit);
  cluster_best(best, best_id, s, by_logit);
  return best_id;
}

// The largest logit of the row (exact in any order), in every thread.
__device__ float row_max(const Row& row, SampleShared& s) {
  float m = -INFINITY;
  for_each_logit(row, [&](int64_t, float l, bool valid) {
    if (valid) m = fmaxf(m, l);
  });
  const auto larger = [](float a, uint32_t, float b, uint32_t) { return a > b; };
  uint32_t unused = 0;
  block_best(m, 0, s, larger);
  cluster_best(m, unused, s, larger);
  if (threadIdx.x == 0) s.row_value = m;
  __syncthreads();
  return s.row_value;
}

// *counter += v, exactly, with two native 32-bit atomics (a 64-bit add to shared memory compiles to a
// compare-and-swap loop, which a bin that many warps hit retries over and over): the low word's carry goes into the
// high word. Integer additions commute, so the total is the same in any order; read it after a barrier.
__device__ __forceinline__ void add_mass(u64* counter, u64 v) {
  auto* words = reinterpret_cast<uint32_t*>(counter);  // little-endian: low word, high word
  const auto low = static_cast<uint32_t>(v);
  const uint32_t before = atomicAdd(&words[0], low);
  const uint32_t high = static_cast<uint32_t>(v >> 32) + (before + low < before ? 1u : 0u);
  if (high != 0) atomicAdd(&words[1], high);
}

template <int kBins>
__device__ void histogram_clear(Histogram<kBins>& h) {
  for (int b = threadIdx.x; b < kBins; b += kSampleThreads) h.mass[b] = 0, h.count[b] = 0, h.first_id[b] = kNoId;
}

// Adds each taking lane's token to its bin. Lanes with the same bin combine first, so a bin many tokens fall into
// costs one atomic per warp, not one per token; where the lanes' bins are (nearly) all distinct, combining would
// run one group after another, so each lane adds its own token instead. The atomics are integer: the totals do not
// depend on the order in which they land. Every lane of the warp calls this.
template <int kBins>
__device__ __forceinline__ void histogram_add(Histogram<kBins>& h, bool take, uint32_t bin, u64 mass, uint32_t id) {
  const unsigned takers = __ballot_sync(kFullMask, take);
  if (!take) return;
  const unsigned peers = __match_any_sync(takers, bin);
  if (__reduce_max_sync(takers, static_cast<unsigned>(__popc(peers))) <= 2) {
    atomicAdd(&h.count[bin], 1u);
    add_mass(&h.mass[bin], mass);
    atomicMin(&h.first_id[bin], id);
    return;
  }
  // The group's weight from two parts whose 32-bit sums over at most 32 lanes cannot overflow (mass <= 2^53).
  const unsigned high = __reduce_add_sync(peers, static_cast<unsigned>(mass >> 27));
  const unsigned low = __reduce_add_sync(peers, static_cast<unsigned>(mass) & ((1u << 27) - 1));
  const unsigned first = __reduce_min_sync(peers, id);
  if (static_cast<int>(threadIdx.x % 32) == __ffs(peers) - 1) {
    atomicAdd(&h.count[bin], static_cast<unsigned>(__popc(peers)));
    add_mass(&h.mass[bin], (static_cast<u64>(high) << 27) + low);
    atomicMin(&h.first_id[bin], first);
  }
}

// Bin b summed over the cluster's blocks (integers: exact in any order).
template <int kBins>
__device__ Tally merged_bin(const Histogram<kBins>& h, int b) {
  Tally t{0, 0};
  const unsigned blocks = cg::this_cluster().num_blocks();
#pragma unroll 4
  for (unsigned r = 0; r < blocks; ++r) {
    const Histogram<kBins>* other = in_block(&h, r);
    t = t + Tally{other->count[b], other->mass[b]};
  }
  return t;
}

// Inclusive prefix sums of v over the block's threads in thread order.
__device__ Tally block_inclusive_scan(Tally v, SampleShared& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const uint32_t count = __shfl_up_sync(kFullMask, v.count, offset);
    const u64 mass = __shfl_up_sync(kFullMask, v.mass, offset);
    if (lane >= offset) v.count += count, v.mass += mass;
  }
  if (lane == 31) s.warp_tally[warp] = v;
  __syncthreads();
  for (int w = 0; w < warp; ++w) v = v + s.warp_tally[w];
  __syncthreads();  // warp_tally is reused
  return v;
}

// A block's share of the cluster's bins, summed over the cluster: block r takes bins [r·S, r·S + S), S = kBins /
// blocks (a power of two: the cluster has 1, 2, 4, 8 or 16 blocks), thread t the next `count` of them from `first`,
// in thread order. So each bin is read from every block once per cluster, not once per block.
template <int kBins>
struct MergedShare {
  static constexpr int kMaxPerThread = (kBins + kSampleThreads - 1) / kSampleThreads;  // a cluster of one block
  Tally bins[kMaxPerThread];
  Tally before;  // the block's bins before this thread's, summed
  int first, count;
};

// The thread's bins of the block's share; the share's total into s.share_total. Expects every block's h to be
// complete; every thread of the block calls it.
template <int kBins>
__device__ MergedShare<kBins> merge_share(const Histogram<kBins>& h, SampleShared& s) {
  cg::cluster_group cluster = cg::this_cluster();
  const int share = kBins / static_cast<int>(cluster.num_blocks());
  const int per = (share + kSampleThreads - 1) / kSampleThreads;
  MergedShare<kBins> m{};
  m.first = static_cast<int>(cluster.block_rank()) * share + static_cast<int>(threadIdx.x) * per;
  m.count = max(0, min(per, share - static_cast<int>(threadIdx.x) * per));
  Tally own{0, 0};
#pragma unroll
  for (int j = 0; j < MergedShare<kBins>::kMaxPerThread; ++j) {
    m.bins[j] = j < m.count ? merged_bin(h, m.first + j) : Tally{0, 0};
    own = own + m.bins[j];
  }
  const Tally inclusive = block_inclusive_scan(own, s);
  m.before = inclusive - own;
  if (threadIdx.x == kSampleThreads - 1) s.share_total = inclusive;
  return m;
}

// The row's level-0 tally: every token of every block. Expects every block's s.level0 to be complete and stay so.
__device__ Tally row_total(SampleShared& s) {
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's level 0 is complete
  merge_share(s.level0, s);
  cluster.sync();  // every block's share_total is written
  if (threadIdx.x == 0) {
    Tally total{0, 0};
    for (unsigned r = 0; r < cluster.num_blocks(); ++r) total = total + *in_block(&s.share_total, r);
    s.total = total;
  }
  __syncthreads();
  const Tally total = s.total;
  __syncthreads();
  return total;
}

// What a descent looks for: the first token in rank order whose running tally (itself included) meets it.
enum class Goal { kCount, kMassAtLeast, kMassAbove };
struct Condition {
  Goal goal;
  uint32_t count;         // kCount: running count >= count (the top_k-th token)
  double mass_threshold;  // kMassAtLeast: running weight >= this (the end of the nucleus)
  u64 total;              // kMassAbove: running weight > u · total, u = u24 / 2^24 (the pick)
  uint32_t u24;

  // Monotone in the tally, and false for the empty one.
  __device__ bool met(Tally t) const {
    if (goal == Goal::kCount) return t.count >= count;
    if (goal == Goal::kMassAtLeast) return static_cast<double>(t.mass) >= mass_threshold;
    // mass · 2^24 > u24 · total, compared exactly in 128 bits.
    const u64 lhs_high = t.mass >> 40, lhs_low = t.mass << 24;
    const u64 rhs_high = __umul64hi(static_cast<u64>(u24), total), rhs_low = static_cast<u64>(u24) * total;
    return lhs_high > rhs_high || (lhs_high == rhs_high && lhs_low > rhs_low);
  }
};

// The bin of the cluster's summed histogram h at which `cond` is first met, counting `base` for everything ranked
// before h's tokens; the condition is monotone, so that bin is unique. Each block sums its share of the bins over
// the cluster (merge_share); the share totals, scanned in block order, say which share holds the bin; that share's
// block scans its bins and writes the boundary into every block. If the condition never turns true (only NaN logits
// do that) the boundary is the last bin, which keeps every later index in range. Every block of the cluster calls it
// and returns the same boundary; h may be rebuilt once it returns.
template <int kBins>
__device__ Boundary find_boundary(const Histogram<kBins>& h, Tally base, const Condition& cond, SampleShared& s) {
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned blocks = cluster.num_blocks();
  cluster.sync();  // every block's h is complete
  if (threadIdx.x == 0) s.boundary = Boundary{kBins - 1, base, 0, kNoId};
  const MergedShare<kBins> m = merge_share(h, s);
  cluster.sync();  // every share_total is written

  if (threadIdx.x < 32) {  // warp 0: lane r scans the shares up to block r's
    const unsigned lane = threadIdx.x;
    Tally inclusive = lane < blocks ? *in_block(&s.share_total, lane) : Tally{0, 0};
    const Tally own = inclusive;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const uint32_t count = __shfl_up_sync(kFullMask, inclusive.count, offset);
      const u64 mass = __shfl_up_sync(kFullMask, inclusive.mass, offset);
      if (lane >= static_cast<unsigned>(offset)) inclusive.count += count, inclusive.mass += mass;
    }
    const Tally before = base + (inclusive - own);
    const unsigned turns = __ballot_sync(kFullMask, lane < blocks && !cond.met(before) && cond.met(base + inclusive));
    if (lane == 0) s.owner = turns != 0 ? __ffs(turns) - 1 : -1;
    if (turns != 0 && lane == static_cast<unsigned>(__ffs(turns) - 1)) s.owner_base = before;
  }
  __syncthreads();
  if (s.owner == static_cast<int>(cluster.block_rank())) {  // the same in every thread of the block
    Tally running = s.owner_base + m.before;
#pragma unroll
    for (int j = 0; j < MergedShare<kBins>::kMaxPerThread; ++j) {
      if (j >= m.count) break;
      const Tally next = running + m.bins[j];
      if (!cond.met(running) && cond.met(next)) {
        const int bin = m.first + j;
        uint32_t first_id = kNoId;
        for (unsigned r = 0; r < blocks; ++r) first_id = min(first_id, in_block(&h, r)->first_id[bin]);
        const Boundary found{bin, running, m.bins[j].count, first_id};
        for (unsigned r = 0; r < blocks; ++r) *in_block(&s.boundary, r) = found;
      }
      running = next;
    }
  }
  cluster.sync();  // the boundary is in every block, and no block reads another's h any more
  const Boundary boundary = s.boundary;
  __syncthreads();  // boundary is reused
  return boundary;
}

// The n-th lowest id (n >= 1) among the row's tokens whose key is `key`, in every thread. The blocks' parts are
// consecutive runs of ids, so the tied tokens of the blocks before this one come first: the block whose part holds
// the n-th counts its own in tiles of 1024 ids, in id order, up to the tile that holds it, ranks it within that tile
// and writes its id into every block.
__device__ uint32_t nth_tied_id(const Row& row, uint32_t key, uint32_t n, SampleShared& s) {
  cg::cluster_group cluster = cg::this_cluster();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t mine = 0;
  for (int64_t tile = row.first; tile < row.last; tile += kSampleThreads) {
    const int64_t i = tile + threadIdx.x;
    mine += static_cast<uint32_t>(__syncthreads_count(i < row.last && row.key(row.at(i)) == key));
  }
  if (threadIdx.x == 0) s.block_tied = mine, s.found_id = kNoId;
  cluster.sync();  // every block's block_tied is written, every found_id cleared
  uint32_t before = 0;
  for (unsigned r = 0; r < cluster.block_rank(); ++r) before += *in_block(&s.block_tied, r);
  if (before < n && n <= before + mine) {  // the same in every thread of the block
    for (int64_t tile = row.first; tile < row.last; tile += kSampleThreads) {
      const int64_t i = tile + threadIdx.x;
      const bool tied = i < row.last && row.key(row.at(i)) == key;
      const uint32_t in_tile = static_cast<uint32_t>(__syncthreads_count(tied));
      if (before + in_tile >= n) {  // the same in every thread
        const unsigned ballot = __ballot_sync(kFullMask, tied);
        if (lane == 0) s.warp_id[warp] = static_cast<uint32_t>(__popc(ballot));
        __syncthreads();
        uint32_t rank = before + static_cast<uint32_t>(__popc(ballot & ((1u << lane) - 1))) + 1;
        for (int w = 0; w < warp; ++w) rank += s.warp_id[w];
        if (tied && rank == n)
          for (unsigned r = 0; r < cluster.num_blocks(); ++r) *in_block(&s.found_id, r) = static_cast<uint32_t>(i);
        break;
      }
      before += in_tile;
    }
  }
  cluster.sync();  // found_id is written in every block; block_tied and warp_id may be reused
  return s.found_id;
}

// A token and the tally of every token up to and including it in rank order.
struct Position {
  uint32_t id;
  Tally through;
};

// The first token in rank order whose running tally meets `cond`. Expects every block's s.level0 to hold its part's
// level-0 histogram; sweeps the part twice (levels 1 and 2), and a third time when the key it lands on is shared by
// tokens and the one it needs is not the lowest-id one of them. Every block of the cluster calls it with the same
// condition and returns the same position.
template <KernelFault kFault>
__device__ Position descend(const Row& row, const Condition& cond, SampleShared& s) {
  const Boundary b0 = find_boundary(s.level0, Tally{0, 0}, cond, s);
  histogram_clear(s.level);
  __syncthreads();
  for_each_logit(row, [&](int64_t i, float l, bool valid) {
    const uint32_t key = row.key(l);
    const bool take = valid && static_cast<int>(key >> kLevel0Shift) == b0.bin;
    histogram_add(s.level, take, (key >> kLevelBits) & (kLevelBins - 1), take ? row.mass(key) : 0,
                  static_cast<uint32_t>(i));
  });
  const Boundary b1 = find_boundary(s.level, b0.before, cond, s);
  const uint32_t prefix = (static_cast<uint32_t>(b0.bin) << kLevelBits) | static_cast<uint32_t>(b1.bin);  // key >> 11

  histogram_clear(s.level);
  __syncthreads();
  for_each_logit(row, [&](int64_t i, float l, bool valid) {
    const uint32_t key = row.key(l);
    const bool take = valid && (key >> kLevelBits) == prefix;
    histogram_add(s.level, take, key & (kLevelBins - 1), take ? row.mass(key) : 0, static_cast<uint32_t>(i));
  });
  const Boundary b2 = find_boundary(s.level, b1.before, cond, s);
  const uint32_t key = (prefix << kLevelBits) | static_cast<uint32_t>(b2.bin);
  const uint32_t tied = b2.count;
  const u64 each = row.mass(key);

  // The tokens of this key weigh the same and come in id order: the first j of them that meets the condition.
  uint32_t lo = 1, hi = tied > 1 ? tied : 1;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (cond.met(b2.before + Tally{mid, mid * each}))
      hi = mid;
    else
      lo = mid + 1;
  }
  // The planted control takes the tied tokens in descending id order instead.
  const uint32_t n = kFault == KernelFault::kSampleTiesToHigher && tied >= lo ? tied + 1 - lo : lo;
  const uint32_t id = n == 1 ? b2.first_id : nth_tied_id(row, key, n, s);
  return Position{id, b2.before + Tally{lo, lo * each}};
}

// The cluster of blocks [r·C, r·C + C) draws row r, block k of it sweeping the k-th of C consecutive parts of the
// row; the blocks meet at cluster barriers and read each other's histograms through distributed shared memory.
template <KernelFault kFault>
__global__ void __launch_bounds__(kSampleThreads) sample_tokens_kernel(SampleTokensParams p, float mass_scale) {
  wait_for_prior_grid();
  __shared__ SampleShared s;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned blocks = cluster.num_blocks(), rank = cluster.block_rank();
  const int64_t r = blockIdx.x / blocks;
  const SampleDraw draw = p.draws[r];
  Row row{};
  row.logits = p.logits + r * p.vocab;
  row.vocab = p.vocab;
  row.allowed = draw.allowed >= 0 && kFault != KernelFault::kSampleIgnoresAllowed ? p.allowed + draw.allowed : nullptr;
  row.vectorized = p.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(p.logits) % 16 == 0;
  const int64_t part = ((p.vocab + blocks - 1) / blocks + 3) & ~int64_t{3};  // whole float4s
  row.first = min(p.vocab, rank * part);
  row.last = min(p.vocab, row.first + part);
  uint32_t id;
  if (draw.greedy) {
    id = row_argmax(row, s);
  } else {
    row.max_logit = row_max(row, s);
    row.inv_temperature = draw.inv_temperature;
    row.mass_scale = mass_scale;
    histogram_clear(s.level0);
    __syncthreads();
    for_each_logit(row, [&](int64_t i, float l, bool valid) {
      const uint32_t key = row.key(l);
      histogram_add(s.level0, valid, key >> kLevel0Shift, valid ? row.mass(key) : 0, static_cast<uint32_t>(i));
    });

    u64 kept = 0;
    if (draw.top_k > 0 && draw.top_k < p.vocab) {
      const Condition top_k{Goal::kCount, static_cast<uint32_t>(draw.top_k), 0.0, 0, 0};
      kept = descend<kFault>(row, top_k, s).through.mass;
    } else {
      kept = row_total(s).mass;
    }
    u64 nucleus = kept;
    if (draw.top_p < 1.0f) {
      const Condition top_p{Goal::kMassAtLeast, 0, static_cast<double>(draw.top_p) * static_cast<double>(kept), 0, 0};
      const Position last = descend<kFault>(row, top_p, s);
      nucleus = last.through.mass;
      // The planted control leaves the nucleus's last token out.
      if (kFault == KernelFault::kSampleTopPOneShort && last.id < p.vocab)
        nucleus -= row.mass(row.key(row.at(last.id)));
    }
    const Condition pick{Goal::kMassAbove, 0, 0.0, nucleus, draw.u24};
    id = descend<kFault>(row, pick, s).id;
  }
  if (rank == 0 && threadIdx.x == 0) p.ids[r] = id < p.vocab ? static_cast<int32_t>(id) : 0;
  cluster.sync();  // no block leaves while another may still read its shared memory
}

// The most blocks a row's cluster may take: 16, or 8 where the GPU cannot co-schedule 16 of these blocks. The driver
// is asked once per kernel; launch_choices.h decides from it how many a launch takes.
template <KernelFault kFault>
unsigned largest_sample_cluster() {
  static const unsigned largest = [] {
    const auto kernel = sample_tokens_kernel<kFault>;
    int clusters = 0;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 16;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(16);
    config.blockDim = dim3(kSampleThreads);
    config.attrs = &attribute;
    config.numAttrs = 1;
    const bool sixteen =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess && clusters > 0;
    cudaGetLastError();  // a refusal above only means clusters of 8
    return sixteen ? 16u : 8u;
  }();
  return largest;
}

template <KernelFault kFault>
void launch_sample_tokens_with(const SampleTokensParams& params, float mass_scale, cudaStream_t stream) {
  const unsigned blocks = choose_sample_cluster_blocks(params.rows, largest_sample_cluster<kFault>(), device_limits());
  launch_kernel_in_clusters(sample_tokens_kernel<kFault>, dim3(static_cast<unsigned>(params.rows) * blocks),
                            dim3(blocks), kSampleThreads, 0, stream, params, mass_scale);
}

}  // namespace

size_t moe_route_smem_bytes(int experts, int top_k) {
  return static_cast<size_t>(experts + top_k) * sizeof(float);
}

void launch_moe_route(const MoeRouteParams& params, KernelFault fault, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(params.tokens));
  const size_t shared = moe_route_smem_bytes(params.experts, params.top_k);
  dispatch_fault<KernelFault::kRouteTiesToHigher>(fault, [&](auto planted) {
    launch_kernel(moe_route_kernel<decltype(planted)::value>, grid, kRouteThreads, shared, stream, params);
  });
}

void launch_sample_tokens(const SampleTokensParams& params, KernelFault fault, cudaStream_t stream) {
  int vocab_bits = 0;
  while ((params.vocab >> vocab_bits) != 0) ++vocab_bits;
  const int shift = 63 - vocab_bits < 53 ? 63 - vocab_bits : 53;  // vocab · 2^shift < 2^63: no sum overflows
  const float mass_scale = static_cast<float>(1ull << shift);
  dispatch_fault<KernelFault::kSampleTiesToHigher, KernelFault::kSampleTopPOneShort,
                 KernelFault::kSampleIgnoresAllowed>(
      fault, [&](auto planted) { launch_sample_tokens_with<decltype(planted)::value>(params, mass_scale, stream); });
}

}  // namespace plumb::cuda
