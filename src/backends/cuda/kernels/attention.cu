// Rotary embedding, the KV-cache scatter and causal grouped-query flash attention over paged BF16 caches.
//
// Attention is exact by construction: every query row walks its keys in blocks of kAttentionKeyBlock from position 0
// upwards with an online softmax, and each of its sums runs in an order fixed by d and the block size alone. A row's
// bits therefore depend only on its position and its sequence's cache, never on the other rows of its tile, how a
// prefill was cut at window boundaries, or what else shares the batch: the tensor cores compute each output row from
// its own row of the A operand, and blocks that are wholly in a row's future leave its state bit-unchanged. A token
// alone in its 64-position window of a call (a decode step) runs as a split tile instead: its keys in the segments
// attention.h fixes by its position, an online softmax each, folded in order, so its bits depend on its position
// alone too, however many CTAs share its segments. A cache page holds one key block, so paging only changes where a
// block is loaded from, never what the arithmetic sees.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/ptx.cuh"

namespace plumb::cuda {
namespace {

// ---------------------------------------------------------------------------------------------------------------------
// Rotary embedding

// One CTA per token; thread i owns frequency i for every head of the token. Products are unfused (__fmul_rn) so the
// rotation rounds as the CPU's does; only cosf/sinf may differ from the host's libm, by an ulp or two.
template <KernelFault kFault>
__global__ void rotary_embedding_kernel(const RotaryParams p) {
  wait_for_prior_grid();
  const int64_t token = blockIdx.x;
  const int half = p.rotary_dim / 2;
  const float position = static_cast<float>(p.positions[token]);
  float* const heads = p.x + token * p.heads * p.head_dim;  // [heads, d]
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = __fmul_rn(position, p.inv_freq[i]);
    const float c = cosf(angle), s = sinf(angle);
    // Rotate-half pairs dim i with dim i + half; the planted fault pairs dim 2i with dim 2i + 1.
    constexpr bool kAdjacent = kFault == KernelFault::kRotaryWrongPairing;
    const int first = kAdjacent ? 2 * i : i;
    const int second = kAdjacent ? 2 * i + 1 : i + half;
    for (int h = 0; h < p.heads; ++h) {
      float* const x = heads + h * p.head_dim;  // [d]
      const float a = x[first], b = x[second];
      x[first] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
      x[second] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Shared helpers

__device__ __forceinline__ float bf16_lo(uint32_t pair) {
  return __uint_as_float(pair << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t pair) {
  return __uint_as_float(pair & 0xffff0000u);
}

// Eight consecutive floats (16-byte aligned) rounded to BF16, round-to-nearest-even, as one 16-byte vector.
__device__ __forceinline__ uint4 bf16x8_from(const float* src) {
  const float4 a = *reinterpret_cast<const float4*>(src);
  const float4 b = *reinterpret_cast<const float4*>(src + 4);
  return make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
}

// Reductions across the four lanes that hold one row of an mma fragment, in a fixed butterfly: every lane ends with
// the same bits ((x0 + x1) + (x2 + x3), addition being commutative).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// ---------------------------------------------------------------------------------------------------------------------
// KV-cache scatter

// One CTA per row of k and v; each thread converts 8 consecutive elements at a time. Fault kKvWriteIgnoresPageTable
// writes into pool page position / 64 itself rather than the sequence's page of that index.
template <KernelFault kFault>
__global__ void kv_cache_write_kernel(const KvCacheWriteParams p) {
  wait_for_prior_grid();
  const int64_t row = blockIdx.x;
  const int32_t sequence = p.row_sequence[row];
  if (sequence < 0) return;
  const AttentionSequence seq = p.sequences[sequence];
  const int64_t width = static_cast<int64_t>(p.kv_heads) * p.head_dim;  // elements per row, a multiple of 8
  const int64_t position = seq.past + (row - seq.begin);
  // The position's pool row: slot position % kAttentionKeyBlock of its page.
  const int64_t page = kFault == KernelFault::kKvWriteIgnoresPageTable
                           ? position / kAttentionKeyBlock
                           : p.pages[seq.first_page + position / kAttentionKeyBlock];
  const int64_t pool_row = page * kAttentionKeyBlock + position % kAttentionKeyBlock;
  const float* const k = p.k + row * width;                 // [nkv, d]
  const float* const v = p.v + row * width;                 // [nkv, d]
  uint16_t* const k_cache = seq.k_pool + pool_row * width;  // [nkv, d]
  uint16_t* const v_cache = seq.v_pool + pool_row * width;  // [nkv, d]
  for (int64_t c = threadIdx.x * 8; c < width; c += blockDim.x * 8) {
    *reinterpret_cast<uint4*>(k_cache + c) = bf16x8_from(k + c);
    *reinterpret_cast<uint4*>(v_cache + c) = bf16x8_from(v + c);
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Attention

constexpr int kWarps = kAttentionTileRows / 16;  // one 16-row mma tile per warp
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 2;  // K/V blocks in shared memory: the next one loads while this one is used

// Shared-memory layout for head dims padded to kDimPad (a multiple of 16: the mma's k step). Rows carry 16 bytes of
// padding, so the eight rows one ldmatrix phase reads start in distinct bank groups.
template <int kDimPad>
struct TileLayout {
  static constexpr int kStride = kDimPad + 8;        // BF16 elements per shared row
  static constexpr int kChunksPerRow = kDimPad / 8;  // 16-byte chunks per row
  static constexpr int kQElements = kAttentionTileRows * kStride;
  static constexpr int kBlockElements = kAttentionKeyBlock * kStride;  // one K or V block
  static constexpr size_t kBytes = (kQElements + 2 * kStages * kBlockElements) * sizeof(uint16_t);
};

// A query row's online-softmax state, in the exp2 domain.
struct SoftmaxRow {
  float max = -INFINITY;  // running max of the scaled scores
  float sum = 0.0f;       // running Σ of the BF16-rounded probabilities, relative to max

  // Takes in a block whose scaled scores peak at block_max; returns the factor that rescales what was accumulated
  // and sets offset to what the block's scores are exponentiated against.
  __device__ __forceinline__ float advance(float block_max, float& offset) {
    const float new_max = fmaxf(max, block_max);
    // Exactly 1 when the max does not move, so a block wholly in this row's future changes nothing.
    const float alpha = new_max == max ? 1.0f : exp2f(__fsub_rn(max, new_max));
    max = new_max;
    // A row that has seen nothing (invalid rows) keeps exp2(-inf - 0) = 0 instead of NaN.
    offset = new_max == -INFINITY ? 0.0f : new_max;
    return alpha;
  }
};

// Takes a segment of running max seg_max and sum seg_sum into a row's fold of the segments before it (max, sum), and
// sets a and b, the factors of the output folded so far and of the segment's. The first segment is taken as it is
// (a and b unused: the caller copies its output).
__device__ __forceinline__ void fold_segment(bool first, float seg_max, float seg_sum, float& max, float& sum, float& a,
                                             float& b) {
  if (first) {
    max = seg_max, sum = seg_sum;
    a = 0.0f, b = 1.0f;
    return;
  }
  const float m = fmaxf(max, seg_max);
  a = exp2f(__fsub_rn(max, m));
  b = exp2f(__fsub_rn(seg_max, m));
  sum = __fadd_rn(__fmul_rn(sum, a), __fmul_rn(seg_sum, b));
  max = m;
}

__device__ __forceinline__ float fold_output(float folded, float segment, float a, float b) {
  return __fadd_rn(__fmul_rn(folded, a), __fmul_rn(segment, b));
}

// The partial row of row r of a split tile's segment `segment` for KV head `kv_head`.
__device__ __forceinline__ int64_t partial_row(const AttentionTile& tile, int kv_head, int segment, int r) {
  return tile.partial_first + (static_cast<int64_t>(kv_head) * kAttentionMaxSegments + segment) * tile.rows + r;
}

// A split tile's last item to arrive: folds its rows' `segments` segments in order from the partials and writes the
// output. The planted kAttentionSegmentsDropLast leaves the last segment out.
template <KernelFault kFault>
__device__ void fold_split_tile(const AttentionParams& p, const AttentionTile& tile, const AttentionSequence& seq,
                                int kv_head, int segments, int group) {
  const int folded = kFault == KernelFault::kAttentionSegmentsDropLast ? segments - 1 : segments;
  const int quads = p.head_dim / 4;  // 4-float columns of a row
  for (int i = static_cast<int>(threadIdx.x); i < tile.rows * quads; i += static_cast<int>(blockDim.x)) {
    const int r = i / quads, col = (i % quads) * 4;
    float fold_max = 0.0f, fold_sum = 0.0f;
    float4 total = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    // Unrolled so that the loads of later segments, which do not wait on the fold, are in flight together.
#pragma unroll 4
    for (int j = 0; j < folded; ++j) {
      const int64_t at = partial_row(tile, kv_head, j, r);
      // Written by other CTAs: read from L2, past this multiprocessor's L1.
      const float2 stats = __ldcg(reinterpret_cast<const float2*>(p.partial_stats + 2 * at));  // max, sum
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p.partial_o + at * p.head_dim + col));
      float a, b;
      fold_segment(j == 0, stats.x, stats.y, fold_max, fold_sum, a, b);
      total = j == 0 ? v
                     : make_float4(fold_output(total.x, v.x, a, b), fold_output(total.y, v.y, a, b),
                                   fold_output(total.z, v.z, a, b), fold_output(total.w, v.w, a, b));
    }
    const int64_t row = tile.first_row + r;
    const int64_t token = seq.begin + row / group;
    const int64_t head = static_cast<int64_t>(kv_head) * group + row % group;
    float* const out = p.o + (token * p.query_heads + head) * p.head_dim + col;
    *reinterpret_cast<float4*>(out) =
        make_float4(total.x / fold_sum, total.y / fold_sum, total.z / fold_sum, total.w / fold_sum);
  }
}

// One work item (grid.y: the KV head): up to kAttentionTileRows query rows of one sequence, 8 warps of 16 rows. Per
// key block: S = Q·Kᵀ on the tensor cores (Q and K BF16, F32 accumulate over d in k steps of 16), scale and causal
// mask, online softmax per row, P rounded to BF16, O += P·V over the block's keys in 4 k steps. Row sums run per
// 8-key column tile (2 lanes' pairs, then the quad butterfly) and then across the 8 tiles in order.
// A whole tile (kSplit false) walks every key of its rows in one online softmax. A split item (one token's rows) walks
// a run of its token's segments, restarting the softmax at each segment and writing each one's output, max and sum to
// the partials; the tile's last item to arrive folds them (fold_split_tile). A token of one segment (at most
// kAttentionSegmentMinBlocks blocks) has a single item, which writes its output as a whole tile would.
template <int kDimPad, KernelFault kFault, bool kSplit>
__device__ __forceinline__ void attention_item(const AttentionParams& p, const AttentionTile tile) {
  using Layout = TileLayout<kDimPad>;
  constexpr int kStride = Layout::kStride;
  constexpr int kChunksPerRow = Layout::kChunksPerRow;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  uint16_t* const sq = reinterpret_cast<uint16_t*>(shared_bytes);  // [tile rows][kStride] BF16
  uint16_t* const sk = sq + Layout::kQElements;                    // [kStages][key block][kStride] BF16
  uint16_t* const sv = sk + kStages * Layout::kBlockElements;      // [kStages][key block][kStride] BF16

  const AttentionSequence seq = p.sequences[tile.sequence];
  const int kv_head = blockIdx.y;
  const int group = p.query_heads / p.kv_heads;
  const int64_t kv_len = seq.past + seq.count;  // positions holding keys after the scatter
  const int valid_rows = tile.rows;
  // The position of tile row r (token (first_row + r) / group of the sequence), or -1 past the tile's rows.
  auto position_of = [&](int r) -> int64_t { return r < valid_rows ? seq.past + (tile.first_row + r) / group : -1; };
  const int num_blocks = static_cast<int>(position_of(valid_rows - 1) / kAttentionKeyBlock) + 1;
  // The blocks this item walks: all of them for a whole tile; for a split item, those of its run of segments.
  const int segments = attention_segments(num_blocks);  // a split tile's (its rows share one position)
  int begin_block = 0, end_block = num_blocks, segment = 0;
  if constexpr (kSplit) {
    const int items = min(p.split_chunks, segments);
    if (tile.chunk >= items) return;  // the token has fewer segments than the launch has items a tile
    segment = tile.chunk * segments / items;
    begin_block = static_cast<int>(attention_segment_begin(segment, num_blocks, segments));
    end_block = static_cast<int>(attention_segment_begin((tile.chunk + 1) * segments / items, num_blocks, segments));
  }
  int next_segment_block = static_cast<int>(attention_segment_begin(segment + 1, num_blocks, segments));

  // Q tile: F32 rounded to BF16, zeros in padding columns and past the tile's rows.
  for (int c = threadIdx.x; c < kAttentionTileRows * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    uint4 packed = make_uint4(0, 0, 0, 0);
    if (r < valid_rows && col < p.head_dim) {
      const int64_t row = tile.first_row + r;
      const int64_t token = seq.begin + row / group;
      const int64_t head = static_cast<int64_t>(kv_head) * group + row % group;
      packed = bf16x8_from(p.q + (token * p.query_heads + head) * p.head_dim + col);
    }
    *reinterpret_cast<uint4*>(sq + r * kStride + col) = packed;
  }

  // Key block `block` (page pages[first_page + block]) into stage `stage`. Positions past the cache's written end and
  // columns past d are zero-filled, so masked keys meet probability 0 times a finite value, never 0 · NaN from
  // unwritten memory. The planted kAttentionPageTableIgnored reads page `block` instead (a page of the pool: the
  // harness's pools hold more pages than any one table).
  auto load_block = [&](int block, int stage) {
    uint16_t* const k_tile = sk + stage * Layout::kBlockElements;  // [key block][kStride]
    uint16_t* const v_tile = sv + stage * Layout::kBlockElements;  // [key block][kStride]
    const int64_t page = kFault == KernelFault::kAttentionPageTableIgnored ? block : p.pages[seq.first_page + block];
    for (int c = threadIdx.x; c < kAttentionKeyBlock * kChunksPerRow; c += kThreads) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const int64_t position = static_cast<int64_t>(block) * kAttentionKeyBlock + r;
      const bool valid = position < kv_len && col < p.head_dim;
      const int64_t offset = valid ? ((page * kAttentionKeyBlock + r) * p.kv_heads + kv_head) * p.head_dim + col : 0;
      cp_async_16(shared_address(k_tile + r * kStride + col), seq.k_pool + offset, valid);
      cp_async_16(shared_address(v_tile + r * kStride + col), seq.v_pool + offset, valid);
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int quad_row = lane / 4, quad_col = 2 * (lane % 4);  // this lane's place in an mma C fragment
  // ldmatrix.x4: lanes 8m..8m+7 address the rows of matrix m.
  const int ld_matrix = lane / 8, ld_row = lane % 8;
  const int a_row = ld_row + (ld_matrix & 1) * 8, a_col = (ld_matrix >> 1) * 8;  // Q (A) and V (B, transposed)
  const int k_row = ld_row + (ld_matrix >> 1) * 8, k_col = (ld_matrix & 1) * 8;  // K (B)

  // This lane's two rows (quad_row and quad_row + 8 of the warp's 16) see keys up to these positions.
  constexpr int64_t kPeek = kFault == KernelFault::kAttentionCausalOffByOne ? 1 : 0;
  const int row_lo = warp * 16 + quad_row, row_hi = row_lo + 8;
  const int64_t limit_lo = position_of(row_lo) + kPeek, limit_hi = position_of(row_hi) + kPeek;
  // The warp's last position (-1 when it holds no rows): blocks beyond it are skipped by the whole warp.
  const int64_t warp_last = warp * 16 < valid_rows ? position_of(min(warp * 16 + 15, valid_rows - 1)) : -1;
  auto output_row = [&](int r) {  // [d]
    const int64_t row = tile.first_row + r;
    const int64_t token = seq.begin + row / group;
    const int64_t head = static_cast<int64_t>(kv_head) * group + row % group;
    return p.o + (token * p.query_heads + head) * p.head_dim;
  };

  float o[kDimPad / 8][4];  // [dim tile][C fragment]: rows row_lo (0, 1) and row_hi (2, 3)
#pragma unroll
  for (int dt = 0; dt < kDimPad / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  SoftmaxRow state_lo, state_hi;

  load_block(begin_block, begin_block % kStages);
  cp_async_commit();
  for (int block = begin_block; block < end_block; ++block) {
    cp_async_wait<0>();
    // Makes every thread's part of this block (and, the first time, of Q) visible, and guarantees every warp is done
    // with the previous block before its stage is refilled below.
    if constexpr (kFault != KernelFault::kAttentionMissingBarrier) __syncthreads();
    if (block + 1 < end_block) {
      load_block(block + 1, (block + 1) % kStages);
      cp_async_commit();
    }
    if (static_cast<int64_t>(block) * kAttentionKeyBlock > warp_last) continue;
    const uint16_t* const k_tile = sk + (block % kStages) * Layout::kBlockElements;
    const uint16_t* const v_tile = sv + (block % kStages) * Layout::kBlockElements;

    // S = Q·Kᵀ: [16 rows][64 keys] per warp as 8 column tiles of 8 keys.
    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kDimPad / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, shared_address(sq + (warp * 16 + a_row) * kStride + kk * 16 + a_col));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, shared_address(k_tile + (np * 16 + k_row) * kStride + kk * 16 + k_col));
        mma_bf16_16816(s[2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma_bf16_16816(s[2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }

    // Scale into the exp2 domain and mask the future with -inf.
    const int64_t key0 = static_cast<int64_t>(block) * kAttentionKeyBlock + quad_col;
    float max_lo = -INFINITY, max_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t key = key0 + nt * 8 + e;
        s[nt][e] = key <= limit_lo ? __fmul_rn(s[nt][e], p.scale_log2) : -INFINITY;
        s[nt][e + 2] = key <= limit_hi ? __fmul_rn(s[nt][e + 2], p.scale_log2) : -INFINITY;
        max_lo = fmaxf(max_lo, s[nt][e]);
        max_hi = fmaxf(max_hi, s[nt][e + 2]);
      }
    }
    float offset_lo, offset_hi;
    const float alpha_lo = state_lo.advance(quad_max(max_lo), offset_lo);
    const float alpha_hi = state_hi.advance(quad_max(max_hi), offset_hi);

    // P = exp2(S - max) rounded to BF16, laid out as the A fragments of P·V (k step kk covers keys 16kk..16kk+15);
    // the row sums add the rounded values, so O / sum weighs V by exactly the probabilities the mma used.
    uint32_t pa[4][4];
    float block_sum_lo = 0.0f, block_sum_hi = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const uint32_t p_lo = pack_bf16(exp2f(__fsub_rn(s[nt][0], offset_lo)), exp2f(__fsub_rn(s[nt][1], offset_lo)));
      const uint32_t p_hi = pack_bf16(exp2f(__fsub_rn(s[nt][2], offset_hi)), exp2f(__fsub_rn(s[nt][3], offset_hi)));
      pa[nt / 2][(nt % 2) * 2] = p_lo;
      pa[nt / 2][(nt % 2) * 2 + 1] = p_hi;
      block_sum_lo = __fadd_rn(block_sum_lo, quad_sum(__fadd_rn(bf16_lo(p_lo), bf16_hi(p_lo))));
      block_sum_hi = __fadd_rn(block_sum_hi, quad_sum(__fadd_rn(bf16_lo(p_hi), bf16_hi(p_hi))));
    }
    state_lo.sum = fmaf(state_lo.sum, alpha_lo, block_sum_lo);
    state_hi.sum = fmaf(state_hi.sum, alpha_hi, block_sum_hi);

    // O = O·alpha + P·V.
#pragma unroll
    for (int dt = 0; dt < kDimPad / 8; ++dt) {
      o[dt][0] = __fmul_rn(o[dt][0], alpha_lo);
      o[dt][1] = __fmul_rn(o[dt][1], alpha_lo);
      o[dt][2] = __fmul_rn(o[dt][2], alpha_hi);
      o[dt][3] = __fmul_rn(o[dt][3], alpha_hi);
    }
#pragma unroll
    for (int kk = 0; kk < kAttentionKeyBlock / 16; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kDimPad / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, shared_address(v_tile + (kk * 16 + a_row) * kStride + dp * 16 + a_col));
        mma_bf16_16816(o[2 * dp], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b[0], b[1]);
        mma_bf16_16816(o[2 * dp + 1], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b[2], b[3]);
      }
    }

    // A split item's segment ends here: its rows' output, max and sum go to the partials, and the next segment
    // starts from an empty state.
    if constexpr (kSplit) {
      if (segments > 1 && block + 1 == next_segment_block) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = half == 0 ? row_lo : row_hi;
          if (r >= valid_rows) continue;
          const int64_t at = partial_row(tile, kv_head, segment, r);
          float* const partial = p.partial_o + at * p.head_dim;  // [d]
#pragma unroll
          for (int dt = 0; dt < kDimPad / 8; ++dt) {
            const int col = dt * 8 + quad_col;
            if (col < p.head_dim)
              *reinterpret_cast<float2*>(partial + col) = make_float2(o[dt][2 * half], o[dt][2 * half + 1]);
            o[dt][2 * half] = o[dt][2 * half + 1] = 0.0f;
          }
          SoftmaxRow& state = half == 0 ? state_lo : state_hi;
          if (quad_col == 0) {
            p.partial_stats[2 * at] = state.max;
            p.partial_stats[2 * at + 1] = state.sum;
          }
          state = SoftmaxRow{};
        }
        ++segment;
        next_segment_block = static_cast<int>(attention_segment_begin(segment + 1, num_blocks, segments));
      }
    }
  }

  if (!kSplit || segments == 1) {
    // O / sum for the rows this tile owns (their sum is >= 1: the max key's probability is exactly 1).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = half == 0 ? row_lo : row_hi;
      if (r >= valid_rows) continue;
      const float sum = half == 0 ? state_lo.sum : state_hi.sum;
      float* const out = output_row(r);
#pragma unroll
      for (int dt = 0; dt < kDimPad / 8; ++dt) {
        const int col = dt * 8 + quad_col;
        if (col < p.head_dim)
          *reinterpret_cast<float2*>(out + col) = make_float2(o[dt][2 * half] / sum, o[dt][2 * half + 1] / sum);
      }
    }
    return;
  }

  // The tile's last item to arrive folds every segment (no item waits for another; which comes last changes no bit).
  __shared__ int is_last;
  int32_t* const arrival = p.arrivals + static_cast<int64_t>(tile.split) * p.kv_heads + kv_head;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(arrival, 1) == min(p.split_chunks, segments) - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  fold_split_tile<kFault>(p, tile, seq, kv_head, segments, group);
  if (threadIdx.x == 0) *arrival = 0;
}

// The attention CTA for KV head blockIdx.y: whole tile blockIdx.x, or split items blockIdx.x, blockIdx.x + gridDim.x,
// ... (each its own variant, so a whole tile carries no split item's state).
template <int kDimPad, KernelFault kFault, bool kSplit>
__global__ void __launch_bounds__(kThreads, 1) attention_kernel(const AttentionParams p) {
  wait_for_prior_grid();
  if constexpr (!kSplit) {
    attention_item<kDimPad, kFault, false>(p, p.tiles[blockIdx.x]);
  } else {
    for (int64_t item = blockIdx.x; item < p.tile_count; item += gridDim.x) {
      // Every warp is done with the item before's shared memory before this one refills it.
      __syncthreads();
      attention_item<kDimPad, kFault, true>(p, p.tiles[item]);
    }
  }
}

// Above 48 KB a kernel must opt in to its dynamic shared memory; once per instantiation. A failure here surfaces as
// the launch's error.
template <int kDimPad, KernelFault kFault, bool kSplit>
void opt_in_shared_memory() {
  static const cudaError_t opted_in =
      cudaFuncSetAttribute(attention_kernel<kDimPad, kFault, kSplit>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(TileLayout<kDimPad>::kBytes));
  (void)opted_in;
}

template <int kDimPad, KernelFault kFault, bool kSplit>
void launch_attention_padded(const AttentionParams& params, int64_t ctas, cudaStream_t stream) {
  opt_in_shared_memory<kDimPad, kFault, kSplit>();
  const int64_t columns = kSplit ? std::min(ctas, params.tile_count) : params.tile_count;
  const dim3 grid(static_cast<unsigned>(columns), static_cast<unsigned>(params.kv_heads));
  launch_kernel(attention_kernel<kDimPad, kFault, kSplit>, grid, kThreads, TileLayout<kDimPad>::kBytes, stream, params);
}

// Calls fn with the head dim padded to the next supported multiple of 16 (zeros in the padding add nothing to Q·Kᵀ),
// as a std::integral_constant.
template <class Fn>
decltype(auto) visit_dim_pad(int head_dim, Fn&& fn) {
  if (head_dim <= 16) return fn(std::integral_constant<int, 16>{});
  if (head_dim <= 32) return fn(std::integral_constant<int, 32>{});
  if (head_dim <= 64) return fn(std::integral_constant<int, 64>{});
  if (head_dim <= 128) return fn(std::integral_constant<int, 128>{});
  return fn(std::integral_constant<int, 256>{});
}

template <KernelFault kFault>
void launch_attention_fault(const AttentionParams& params, int64_t ctas, cudaStream_t stream) {
  visit_dim_pad(params.head_dim, [&](auto pad) {
    constexpr int kDimPad = decltype(pad)::value;
    if (ctas > 0)
      launch_attention_padded<kDimPad, kFault, true>(params, ctas, stream);
    else
      launch_attention_padded<kDimPad, kFault, false>(params, 0, stream);
  });
}

}  // namespace

void launch_rotary_embedding(const RotaryParams& params, KernelFault fault, cudaStream_t stream) {
  // One warp per 32 frequencies, at most 4 warps; a thread loops if rotary_dim / 2 exceeds 128.
  const int half = params.rotary_dim / 2;
  const int threads = std::min(128, (half + 31) / 32 * 32);
  const dim3 grid(static_cast<unsigned>(params.tokens));
  dispatch_fault<KernelFault::kRotaryWrongPairing>(fault, [&](auto planted) {
    launch_kernel(rotary_embedding_kernel<decltype(planted)::value>, grid, threads, 0, stream, params);
  });
}

void launch_kv_cache_write(const KvCacheWriteParams& params, KernelFault fault, cudaStream_t stream) {
  const auto grid = static_cast<unsigned>(params.tokens);
  dispatch_fault<KernelFault::kKvWriteIgnoresPageTable>(fault, [&](auto planted) {
    launch_kernel(kv_cache_write_kernel<decltype(planted)::value>, grid, 64, 0, stream, params);
  });
}

size_t attention_smem_bytes(int head_dim) {
  return visit_dim_pad(head_dim, [](auto pad) { return TileLayout<decltype(pad)::value>::kBytes; });
}

void launch_attention(const AttentionParams& params, int64_t ctas, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kAttentionCausalOffByOne, KernelFault::kAttentionMissingBarrier,
                 KernelFault::kAttentionPageTableIgnored, KernelFault::kAttentionSegmentsDropLast>(
      fault, [&](auto planted) { launch_attention_fault<decltype(planted)::value>(params, ctas, stream); });
}

int attention_ctas_per_multiprocessor(int head_dim) {
  return visit_dim_pad(head_dim, [](auto pad) {
    constexpr int kDimPad = decltype(pad)::value;
    static const int ctas = [] {
      opt_in_shared_memory<kDimPad, KernelFault::kNone, true>();
      int count = 0;
      const cudaError_t status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &count, attention_kernel<kDimPad, KernelFault::kNone, true>, kThreads, TileLayout<kDimPad>::kBytes);
      return status == cudaSuccess && count > 0 ? count : 1;
    }();
    return ctas;
  });
}

}  // namespace plumb::cuda
