// The BF16 matrix-product kernels of decode (linear.h states the contract; linear.cu says how the kernels share one
// arithmetic): linear_stream_kernel, weights through a ring of registers, and linear_stream_ring_kernel, for row tiles
// of up to 16 rows, weights and activations through a deep ring of shared memory.
#include <algorithm>

#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/launch_choices.h"
#include "backends/cuda/kernels/linear_common.cuh"

namespace plumb::cuda::linear_detail {
namespace {

// ---- The BF16 streaming kernel (decode). ----

// The lane's 8 k from kk of one weight row (nullptr: a feature past n) in their stored form, zero past k; NVFP4 with
// the scale of their group from `groups` (the row's group scales; the planted control takes the neighbouring group's
// where the row has one). kVec: one load of all eight (row aligned, k a multiple of 8, so the 8 k are all in or all
// out); otherwise element by element, the same bits. NVFP4 rows are whole groups of 16, always aligned for the one
// 4-byte load.
template <class W, bool kVec, KernelFault kFault = KernelFault::kNone>
__device__ __forceinline__ WeightBits<W> weight_unit(const typename W::Elem* row, const uint8_t* groups, int kk,
                                                     int k) {
  if (row == nullptr || kk >= k) return WeightBits<W>{};
  if constexpr (W::kGroupScaled) {
    int group = kk / kNvfp4Group;
    if (kFault == KernelFault::kLinearNvfp4ScaleNextGroup && (group ^ 1) * kNvfp4Group < k) group ^= 1;
    return make_uint2(load_streamed_4(row + kk / 2), __ldg(groups + group));
  } else if constexpr (kVec) {
    if constexpr (W::kScaled) {
      return load_streamed_8(row + kk);
    } else {
      return load_streamed(row + kk);
    }
  } else {
    constexpr int kBits = 8 * sizeof(typename W::Elem), kPerWord = 32 / kBits;
    uint32_t words[8 / kPerWord] = {};
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (kk + e < k) words[e / kPerWord] |= static_cast<uint32_t>(row[kk + e]) << (e % kPerWord * kBits);
    WeightBits<W> v;
    memcpy(&v, words, sizeof v);
    return v;
  }
}

// One chunk of the lane's weights in their stored form: its 8 k of weight rows g (lo) and g + 8 (hi).
template <class W>
struct WeightChunk {
  WeightBits<W> lo, hi;
};

// Stages k [k0, k0 + kSlabK) of the tile's first `rows` product rows into `slab` (rows past them are never read).
// Every thread of the block takes a share.
template <class S, bool kVec>
__device__ __forceinline__ void stage_x_slab(const typename S::XElem* x, const int64_t* x_offset, int rows, int k,
                                             int k0, char* slab) {
  constexpr int kPerUnit = 16 / static_cast<int>(sizeof(typename S::XElem));
  for (int i = static_cast<int>(threadIdx.x); i < rows * S::kUnitsX; i += static_cast<int>(blockDim.x)) {
    const int r = i / S::kUnitsX, u = i % S::kUnitsX;
    stage_unit<typename S::XElem, kVec>(slab + tile_offset<typename S::XElem>(r, u, S::kUnitsX), x + x_offset[r], x,
                                        k0 + u * kPerUnit, k);
  }
}

// Block of blockDim.x / 32 warps; warp w computes features [16 w, 16 w + 16) of the block's feature block for every
// product row of its row tile over the block's run of K-slices, chunk after chunk in ascending k: the arithmetic of
// linear.h. Block b takes K-group b % k_split of tile b / k_split.
template <class S, class W, bool kVec, KernelFault kFault>
__global__ void __launch_bounds__(32 * kStreamMaxWarps, S::kMinBlocks) linear_stream_kernel(const LinearParams p) {
  wait_for_prior_grid();
  using XElem = typename S::XElem;
  extern __shared__ __align__(128) char smem[];  // 2 slabs x [kRows x kSlabK] XElem
  __shared__ int64_t x_offset[S::kRows];         // element offset of each product row's activations

  const int warps = static_cast<int>(blockDim.x) / 32;
  const int block_features = 16 * warps;
  const int tile_id = static_cast<int>(blockIdx.x) / p.k_split;
  const BlockTile bt = block_tile(tile_id, (p.n + block_features - 1) / block_features, p.max_tiles);
  RowTile rt;
  if (!row_tile(p, bt.tile, S::kRows, &rt)) return;
  const int rows = rt.end - rt.begin;
  for (int r = static_cast<int>(threadIdx.x); r < rows; r += static_cast<int>(blockDim.x)) {
    const int row = rt.begin + r;
    x_offset[r] = static_cast<int64_t>(p.x_index ? p.x_index[row] : row) * p.k;
  }
  __syncthreads();

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int block_feature0 = bt.feature_block * block_features;
  const int warp_feature0 = block_feature0 + 16 * warp;
  // A warp wholly past n loads and multiplies nothing, but still stages activations and meets the barriers.
  const bool warp_active = warp_feature0 < p.n;
  using WElem = typename W::Elem;
  const int feature = warp_feature0 + g;
  const SliceScales scales = slice_scales<W>(p, rt.group, feature);
  const auto* x = static_cast<const XElem*>(p.x);  // [x_rows, k]
  // The block's slices: k [k0, k_end), loaded from the chunk c0 = k0 / kChunkK on. Weight rows and activations are
  // addressed from k0, so each run of the ring reads exactly its slices.
  const SliceRange sr = slice_range(p, static_cast<int>(blockIdx.x) % p.k_split);
  const int k0 = sr.begin * kSliceK, k_end = min(p.k, sr.end * kSliceK), k_len = k_end - k0;
  // Weight rows in their stored form (NVFP4: two k a byte; every offset whole groups, so the halving is exact).
  const WElem* w = static_cast<const WElem*>(p.w) + rt.group * p.w_group_stride / W::kPerElem;  // [n, k]
  const WElem* w_lo = feature < p.n ? w + (static_cast<int64_t>(feature) * p.k + k0) / W::kPerElem : nullptr;
  const WElem* w_hi = feature + 8 < p.n ? w + (static_cast<int64_t>(feature + 8) * p.k + k0) / W::kPerElem : nullptr;
  const uint8_t* groups_lo = group_scale_row<W>(p, rt.group, feature, k0);      // [k_len / 16], NVFP4 only
  const uint8_t* groups_hi = group_scale_row<W>(p, rt.group, feature + 8, k0);  // [k_len / 16], NVFP4 only
  const int all_chunks = (k_len + kChunkK - 1) / kChunkK;
  const int slabs = (all_chunks + S::kRing - 1) / S::kRing;
  // The planted control leaves the product's last chunk out of every reduction.
  const int chunks = kFault == KernelFault::kLinearDropsLastKTile && k_end == p.k ? all_chunks - 1 : all_chunks;

  // Slot i of the ring always holds a chunk c with c % kRing == i: chunk c + kRing is loaded the moment chunk c is
  // used, so the slot indices stay compile-time constants and the registers stay registers.
  WeightChunk<W> ring[S::kRing];
#pragma unroll
  for (int i = 0; i < S::kRing; ++i) {
    const int kk = i * kChunkK + 8 * q;
    ring[i].lo = warp_active ? weight_unit<W, kVec, kFault>(w_lo, groups_lo, kk, k_len) : WeightBits<W>{};
    ring[i].hi = warp_active ? weight_unit<W, kVec, kFault>(w_hi, groups_hi, kk, k_len) : WeightBits<W>{};
  }
  // Each slab is one cp.async group, so waiting for all but the newest group waits for the slab about to be used.
  if (slabs > 0) stage_x_slab<S, kVec>(x, x_offset, rows, k_end, k0, smem);
  cp_async_commit();

  static_assert(S::kRing % kSliceChunks == 0, "a ring of whole slices keeps their ends at fixed slots");
  // The multipliers of the slice being summed, loaded as the slice before it ends.
  SliceMultipliers multipliers = slice_multipliers<W, kFault>(p, scales, sr.begin);
  float acc[S::kNTiles][4] = {};
  float sum[S::kNTiles][4];
  start_running_sums(sum);
  for (int s = 0; s < slabs; ++s) {
    // Slab s + 1 goes into the buffer slab s - 1 used, which the barrier ending the last round freed.
    if (s + 1 < slabs) {
      stage_x_slab<S, kVec>(x, x_offset, rows, k_end, k0 + (s + 1) * S::kSlabK, smem + ((s + 1) % 2) * S::kSlabBytes);
    }
    cp_async_commit();
    // Slab s has landed for this thread; the barrier makes it everyone's.
    cp_async_wait<1>();
    __syncthreads();
    const char* slab = smem + (s % 2) * S::kSlabBytes;
    if (warp_active) {
#pragma unroll
      for (int i = 0; i < S::kRing; ++i) {
        const int c = s * S::kRing + i;
        if (c < chunks) {
          constexpr bool kSwap = kFault == KernelFault::kLinearNvfp4NibblesSwapped;
          const uint4 lo = widen_weights<W, kSwap>(ring[i].lo), hi = widen_weights<W, kSwap>(ring[i].hi);
#pragma unroll
          for (int nt = 0; nt < S::kNTiles; ++nt) {
            const int row = nt * 8 + g;
            const uint4 xv = row < rows ? x_fragment<S>(slab, row, i, q) : make_uint4(0, 0, 0, 0);
            mma_chunk(acc[nt], lo, hi, xv);
          }
        }
        // The end of a slice that has k in it (the last one may be short).
        if (i % kSliceChunks == kSliceChunks - 1 && c - (kSliceChunks - 1) < all_chunks) {
          const int slice = sr.begin + c / kSliceChunks;
#pragma unroll
          for (int nt = 0; nt < S::kNTiles; ++nt)
            end_slice<W>(p, slice, rt.begin + nt * 8, rt.end, feature, multipliers, acc[nt], sum[nt]);
          multipliers = slice_multipliers<W, kFault>(p, scales, slice + 1);
        }
        const int kk = (c + S::kRing) * kChunkK + 8 * q;
        ring[i].lo = weight_unit<W, kVec, kFault>(w_lo, groups_lo, kk, k_len);
        ring[i].hi = weight_unit<W, kVec, kFault>(w_hi, groups_hi, kk, k_len);
      }
    }
    // Everyone is done with slab s before the next round refills its buffer.
    __syncthreads();
  }

  if (p.k_split > 1) {
    fold_split_tile<kFault>(p, tile_id, rt.begin, rt.end, block_feature0, min(block_features, p.n - block_feature0));
    return;
  }
  if (!warp_active) return;
#pragma unroll
  for (int nt = 0; nt < S::kNTiles; ++nt) store_output_tile<kFault>(p, rt.begin + nt * 8, rt.end, feature, sum[nt]);
}

// A warp's weights for one stage of the ring. BF16: chunk c's row-g units of its 32 lanes (lane order), then its row
// g + 8 units, each lane copying the 16 bytes it reads itself. FP8: the warp's 16 rows (row r is feature r of the
// warp's 16, so lane g's rows g and g + 8), 128 bytes each, copied a 16-byte unit per lane and instruction, eight lanes
// a row, so every copy is a whole line and moves as many bytes as BF16's; unit u of row r sits at unit u ^ (2r mod 8),
// so that the 8-byte reads of half a warp (rows g to g + 3, units 2c and 2c + 1 of each) meet every bank once.
template <class W>
struct StagedWeights {
  static constexpr int kLaneBytes = static_cast<int>(sizeof(WeightBits<W>));
  static constexpr int kBytes = kSliceChunks * 2 * 32 * kLaneBytes;  // a warp's, one stage
  static_assert(W::kScaled ? kBytes == 16 * kSliceK : true, "FP8: 16 rows of one slice");

  __device__ static int fp8_offset(int row, int unit) { return row * kSliceK + ((unit ^ ((2 * row) & 7)) * 16); }

  // Copies k [k0, k0 + kSliceK) of the warp's rows into `dst` (zero past k_len and past n). w_warp: the warp's first
  // row from the block's first k, `valid_rows` of its 16 past n's edge; w_lo, w_hi: lane g's rows g and g + 8 (nullptr
  // past n).
  template <bool kVec>
  __device__ static void load(char* dst, const typename W::Elem* w_warp, int valid_rows, const typename W::Elem* w_lo,
                              const typename W::Elem* w_hi, const typename W::Elem* any_valid, int64_t k, int k0,
                              int k_len) {
    const int lane = static_cast<int>(threadIdx.x) % 32, q = lane % 4;
    if constexpr (W::kScaled) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int row = j * 4 + lane / 8, unit = lane % 8;
        const uint8_t* src = row < valid_rows ? w_warp + row * k : nullptr;
        stage_unit<uint8_t, kVec>(dst + fp8_offset(row, unit), src, any_valid, k0 + unit * 16, k_len);
      }
    } else {
      char* mine = dst + lane * kLaneBytes;
      if (kVec && w_hi != nullptr && k0 + kSliceK <= k_len) {
        // Both rows exist and the stage lies within k: no per-unit checks.
#pragma unroll
        for (int c = 0; c < kSliceChunks; ++c) {
          cp_async_16_line(mine + (2 * c) * 32 * kLaneBytes, w_lo + k0 + c * kChunkK + 8 * q);
          cp_async_16_line(mine + (2 * c + 1) * 32 * kLaneBytes, w_hi + k0 + c * kChunkK + 8 * q);
        }
      } else {
#pragma unroll
        for (int c = 0; c < kSliceChunks; ++c) {
          const int kk = k0 + c * kChunkK + 8 * q;
          stage_unit<uint16_t, kVec>(mine + (2 * c) * 32 * kLaneBytes, w_lo, any_valid, kk, k_len);
          stage_unit<uint16_t, kVec>(mine + (2 * c + 1) * 32 * kLaneBytes, w_hi, any_valid, kk, k_len);
        }
      }
    }
  }

  // The lane's 8 k of chunk c of rows g (lo) and g + 8 (hi), widened to BF16 pairs.
  template <KernelFault kFault>
  __device__ static void read(const char* src, int c, uint4* lo, uint4* hi) {
    const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
    if constexpr (W::kScaled) {
      const int at = (q % 2) * 8;
      *lo = widen_weights<W>(*reinterpret_cast<const uint2*>(src + fp8_offset(g, 2 * c + q / 2) + at));
      *hi = widen_weights<W>(*reinterpret_cast<const uint2*>(src + fp8_offset(g + 8, 2 * c + q / 2) + at));
    } else {
      *lo = *reinterpret_cast<const uint4*>(src + (2 * c * 32 + lane) * kLaneBytes);
      *hi = *reinterpret_cast<const uint4*>(src + ((2 * c + 1) * 32 + lane) * kLaneBytes);
    }
  }
};

// NVFP4: the warp's 16 rows, a slice's 64 bytes of codes each, then their 8 group scales each. Codes are copied a
// 16-byte unit a lane and instruction (rows 8j + lane / 4, unit lane % 4); unit u of row r sits at unit
// u ^ ((r / 2) mod 4), so that a warp's 4-byte reads (rows g, unit c, bytes 4q) meet every bank once. Lanes 0-15 copy
// a row's 8 scales each. The copies need k and the matrices' stride multiples of a slice (`whole`: rows of whole
// 16-byte units of codes and 8-byte aligned runs of scales); otherwise a stage is copied a byte at a time, the same
// bytes. Past k and past n the codes are zero, so their products are zero whatever the scales.
template <>
struct StagedWeights<Nvfp4Weights> {
  static constexpr int kRowCodeBytes = kSliceK / 2, kRowScales = kSliceK / kNvfp4Group;
  static constexpr int kScaleOffset = 16 * kRowCodeBytes;
  static constexpr int kBytes = kScaleOffset + 16 * kRowScales;  // a warp's, one stage

  __device__ static int code_offset(int row, int unit) { return row * kRowCodeBytes + (unit ^ ((row / 2) & 3)) * 16; }

  // Copies k [k0, k0 + kSliceK) of the warp's rows into `dst`. w_warp: the warp's first row's codes from the block's
  // first k; scales_warp: its group scales from there; `valid_rows` of the 16 before n's edge; k_len: the block's k.
  __device__ static void load(char* dst, const uint8_t* w_warp, const uint8_t* scales_warp, int valid_rows, bool whole,
                              int64_t k, int k0, int k_len) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t row_bytes = k / 2, row_scales = k / kNvfp4Group;
    if (whole) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = 8 * j + lane / 4, unit = lane % 4;
        const bool valid = row < valid_rows && k0 + 32 * unit < k_len;
        cp_async_16(dst + code_offset(row, unit), valid ? w_warp + row * row_bytes + k0 / 2 + 16 * unit : w_warp,
                    valid);
      }
      if (lane < 16) {
        const bool valid = lane < valid_rows && k0 < k_len;
        cp_async_8(dst + kScaleOffset + lane * kRowScales,
                   valid ? scales_warp + lane * row_scales + k0 / kNvfp4Group : scales_warp, valid);
      }
    } else {
      for (int i = lane; i < 16 * kRowCodeBytes; i += 32) {
        const int row = i / kRowCodeBytes, byte = i % kRowCodeBytes;
        const bool valid = row < valid_rows && k0 + 2 * byte < k_len;
        dst[code_offset(row, byte / 16) + byte % 16] = valid ? w_warp[row * row_bytes + k0 / 2 + byte] : 0;
      }
      for (int i = lane; i < 16 * kRowScales; i += 32) {
        const int row = i / kRowScales, group = i % kRowScales;
        const bool valid = row < valid_rows && k0 + kNvfp4Group * group < k_len;
        dst[kScaleOffset + i] = valid ? scales_warp[row * row_scales + k0 / kNvfp4Group + group] : 0;
      }
    }
  }

  // The lane's 8 k of chunk c of rows g (lo) and g + 8 (hi), widened to BF16 pairs (the planted controls: each byte's
  // codes swapped, or the scale of the other group of the lane's pair).
  template <KernelFault kFault>
  __device__ static void read(const char* src, int c, uint4* lo, uint4* hi) {
    const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
    const int group = 2 * c + (kFault == KernelFault::kLinearNvfp4ScaleNextGroup ? (q / 2) ^ 1 : q / 2);
    constexpr bool kSwap = kFault == KernelFault::kLinearNvfp4NibblesSwapped;
    const auto unit = [&](int row) {
      const uint32_t codes = *reinterpret_cast<const uint32_t*>(src + code_offset(row, c) + 4 * q);
      const uint8_t scale = *reinterpret_cast<const uint8_t*>(src + kScaleOffset + row * kRowScales + group);
      return widen_weights<Nvfp4Weights, kSwap>(make_uint2(codes, scale));
    };
    *lo = unit(g);
    *hi = unit(g + 8);
  }
};

// The shared-memory ring kernel's launch shapes, for plain decode products: stages of 4 chunks of k holding each
// warp's 16 weight rows (4 KB of BF16, 2 KB of FP8) and the activations (512 bytes a row), kDepth stages deep. Up
// to 8 rows: one-warp blocks, each with its own copy of the activations and 20 KB of BF16 weights in flight (a product
// of one row has too few warps to hide a block barrier). Up to 16 rows: four warps share the activations and meet at
// a barrier every stage, 28 KB of BF16 weights in flight each. FP8 rings are 4 stages deep (6-8 KB of weights in
// flight a warp), so that 19 one-warp blocks (or 3 four-warp ones) fit a multiprocessor: FP8's widening wants about
// 16 warps there (choose_linear_k_split), where rings holding as many bytes in flight as BF16's (11 and 12 stages) fit
// 7 blocks (or 1), leaving such splits to the register ring. linear_bench --weights fp8 on the H200 (2026-12-04): at 1
// to 16 rows the 4-stage ring was the fastest kernel at every shape, 8-16 % faster than the register ring at T = 1
// and never slower than the 11- or 12-stage ring (docs/performance.md).
template <int kNTiles_, int kWarps_, int kDepth_, class W_>
struct RingShape {
  using XElem = float;
  using W = W_;
  static constexpr int kNTiles = kNTiles_, kWarps = kWarps_, kDepth = kDepth_;
  static constexpr int kRows = 8 * kNTiles, kStageChunks = 4;
  static constexpr int kStageK = kChunkK * kStageChunks;
  static constexpr int kUnitsX = kStageK * 4 / 16;               // 16-byte units per slab row
  static constexpr int kWeightBytes = StagedWeights<W>::kBytes;  // a warp's weights for a stage
  static_assert(kUnitsX % 8 == 0, "the swizzle needs rows of whole 128-byte windows");
  // Bytes of a launch's ring: rows = the product's rows.
  static constexpr int ring_bytes(int rows) { return kDepth * (rows * kUnitsX * 16 + kWarps * kWeightBytes); }
};
using Ring8 = RingShape<1, 1, 6, Bf16Weights>;
using Ring16 = RingShape<2, 4, 8, Bf16Weights>;
using Ring8Fp8 = RingShape<1, 1, 4, Fp8Weights>;
using Ring16Fp8 = RingShape<2, 4, 4, Fp8Weights>;
// NVFP4 as FP8 (its stages hold 1152 bytes of weights a warp, FP8's 2 KB).
using Ring8Nvfp4 = RingShape<1, 1, 4, Nvfp4Weights>;
using Ring16Nvfp4 = RingShape<2, 4, 4, Nvfp4Weights>;

// The block's barrier: __syncwarp for a block of one warp.
template <class S>
__device__ __forceinline__ void block_barrier() {
  if constexpr (S::kWarps == 1) {
    __syncwarp();
  } else {
    __syncthreads();
  }
}

// Block of kWarps warps; warp w computes features [16 w, 16 w + 16) of the block's feature block for every row of its
// row tile (a plain product's up to kRows rows, or one tile of a grouped product's) over the block's run of K-slices,
// chunk after chunk in ascending k: the arithmetic of linear.h. Block b takes K-group b % k_split of tile b / k_split
// (a feature block and a row tile, block_tile). Each stage is one slice and is one cp.async group, made the block's
// (or for one warp the warp's) by the barrier every stage begins with. kGrouped: p is a grouped product, each block
// looking up its tile; a plain product's rows are one row tile, at row 0 of matrix 0 at compile time (with the choice
// made at run time, BF16's B=1 decode step measured 0.6-1.2 % slower in two A/B calls on the H200; at compile time,
// within resolution; 2026-12-04).
template <class S, bool kVec, bool kGrouped, KernelFault kFault>
__global__ void __launch_bounds__(32 * S::kWarps) linear_stream_ring_kernel(const LinearParams p) {
  wait_for_prior_grid();
  using W = typename S::W;
  using WElem = typename W::Elem;
  // kDepth stages x [activations: rows x kStageK F32 | warp 0's weights | warp 1's | ...] (StagedWeights).
  extern __shared__ __align__(128) char smem[];
  __shared__ int64_t x_offset[S::kRows];  // element offset of each product row's activations
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = S::kWarps == 1 ? 0 : static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int tile_id = static_cast<int>(blockIdx.x) / p.k_split;
  BlockTile bt{tile_id, 0};
  RowTile rt{0, 0, p.rows};
  if constexpr (kGrouped) {
    bt = block_tile(tile_id, (p.n + 16 * S::kWarps - 1) / (16 * S::kWarps), p.max_tiles);
    if (!row_tile(p, bt.tile, S::kRows, &rt)) return;
  }
  // At most ring_rows(p) <= kRows <= the block's threads: the launch sized the ring for that many.
  const int rows = rt.end - rt.begin;
  if (static_cast<int>(threadIdx.x) < rows) {
    const int row = rt.begin + static_cast<int>(threadIdx.x);
    x_offset[threadIdx.x] = static_cast<int64_t>(p.x_index ? p.x_index[row] : row) * p.k;
  }
  block_barrier<S>();

  const int block_feature0 = bt.feature_block * S::kWarps * 16;
  const int warp_feature0 = block_feature0 + warp * 16;
  // A warp wholly past n loads and multiplies nothing, but still stages activations and meets the barriers. A
  // one-warp block always has features (the grid has one block per 16).
  const bool warp_active = S::kWarps == 1 || warp_feature0 < p.n;
  const int feature = warp_feature0 + g;
  // The block's slices: k [kb, k_end), one slice a stage. Weight rows are addressed from kb.
  const SliceRange sr = slice_range(p, static_cast<int>(blockIdx.x) % p.k_split);
  const int kb = sr.begin * kSliceK, k_end = min(p.k, sr.end * kSliceK), k_len = k_end - kb;
  // Weight rows in their stored form (NVFP4: two k a byte; every offset whole groups, so the halving is exact).
  const WElem* w = static_cast<const WElem*>(p.w) + rt.group * p.w_group_stride / W::kPerElem;  // [n, k]
  const WElem* w_lo = feature < p.n ? w + (static_cast<int64_t>(feature) * p.k + kb) / W::kPerElem : nullptr;
  const WElem* w_hi = feature + 8 < p.n ? w + (static_cast<int64_t>(feature + 8) * p.k + kb) / W::kPerElem : nullptr;
  const SliceScales scales = slice_scales<W>(p, rt.group, feature);
  const auto* x = static_cast<const float*>(p.x);  // [x_rows, k]
  const int slab_bytes = rows * S::kUnitsX * 16;
  const int stage_bytes = slab_bytes + S::kWarps * S::kWeightBytes;
  const int warp_weights = slab_bytes + warp * S::kWeightBytes;  // this warp's, in a stage
  const WElem* w_warp = warp_active ? w + (static_cast<int64_t>(warp_feature0) * p.k + kb) / W::kPerElem : w;
  const uint8_t* scales_warp = group_scale_row<W>(p, rt.group, warp_feature0, kb);  // NVFP4: [16, k / 16] from kb
  const int valid_rows = min(16, p.n - warp_feature0);
  const int all_chunks = (k_len + kChunkK - 1) / kChunkK;
  static_assert(S::kStageChunks == kSliceChunks, "a stage is one slice");
  const int stages = (all_chunks + S::kStageChunks - 1) / S::kStageChunks;
  // The planted control leaves the product's last chunk out of every reduction.
  const int chunks = kFault == KernelFault::kLinearDropsLastKTile && k_end == p.k ? all_chunks - 1 : all_chunks;

  auto load_stage = [&](int s) {
    char* stage = smem + (s % S::kDepth) * stage_bytes;
    const int k0 = s * S::kStageK;
    stage_x_slab<S, kVec>(x, x_offset, rows, k_end, kb + k0, stage);
    if (!warp_active) {
    } else if constexpr (W::kGroupScaled) {
      const bool whole = kVec && p.k % kSliceK == 0 && p.w_group_stride % kSliceK == 0;
      StagedWeights<W>::load(stage + warp_weights, w_warp, scales_warp, valid_rows, whole, p.k, k0, k_len);
    } else {
      StagedWeights<W>::template load<kVec>(stage + warp_weights, w_warp, valid_rows, w_lo, w_hi, w, p.k, k0, k_len);
    }
    cp_async_commit();
  };
  for (int s = 0; s < S::kDepth - 1; ++s) {
    if (s < stages) {
      load_stage(s);
    } else {
      cp_async_commit();
    }
  }

  // The multipliers of the slice being summed, loaded as the slice before it ends.
  SliceMultipliers multipliers = slice_multipliers<W, kFault>(p, scales, sr.begin);
  float acc[S::kNTiles][4] = {};
  float sum[S::kNTiles][4];
  start_running_sums(sum);
  for (int s = 0; s < stages; ++s) {
    // Stage s has landed for this thread; the barrier makes its activations everyone's and frees the buffer read last
    // round.
    cp_async_wait<S::kDepth - 2>();
    block_barrier<S>();
    if (s + S::kDepth - 1 < stages) {
      load_stage(s + S::kDepth - 1);
    } else {
      cp_async_commit();
    }
    if (!warp_active) continue;
    const char* stage = smem + (s % S::kDepth) * stage_bytes;
#pragma unroll
    for (int c = 0; c < S::kStageChunks; ++c) {
      if (s * S::kStageChunks + c >= chunks) break;
      uint4 lo, hi;
      StagedWeights<W>::template read<kFault>(stage + warp_weights, c, &lo, &hi);
#pragma unroll
      for (int nt = 0; nt < S::kNTiles; ++nt) {
        const int row = nt * 8 + g;
        const uint4 xv = row < rows ? x_fragment<S>(stage, row, c, q) : make_uint4(0, 0, 0, 0);
        mma_chunk(acc[nt], lo, hi, xv);
      }
    }
#pragma unroll
    for (int nt = 0; nt < S::kNTiles; ++nt)
      end_slice<W>(p, sr.begin + s, rt.begin + nt * 8, rt.end, feature, multipliers, acc[nt], sum[nt]);
    multipliers = slice_multipliers<W, kFault>(p, scales, sr.begin + s + 1);
  }

  if (p.k_split > 1) {
    fold_split_tile<kFault>(p, tile_id, rt.begin, rt.end, block_feature0, min(S::kWarps * 16, p.n - block_feature0));
    return;
  }
  if (!warp_active) return;
#pragma unroll
  for (int nt = 0; nt < S::kNTiles; ++nt) store_output_tile<kFault>(p, rt.begin + nt * 8, rt.end, feature, sum[nt]);
}

// ---- Launchers. ----

// Warps per streaming block: the forced count, or launch_choices.h's.
int stream_warps(const LinearParams& p) {
  if (p.stream_warps > 0) return p.stream_warps;
  return choose_linear_stream_warps(static_cast<int64_t>((p.n + 15) / 16) * p.max_tiles * p.k_split, kStreamMaxWarps,
                                    device_limits());
}

// The ring shape a streaming shape hands plain products of weights W to (void: none).
template <class S, class W>
struct RingFor {
  using type = void;
};
template <>
struct RingFor<Stream8, Bf16Weights> {
  using type = Ring8;
};
template <>
struct RingFor<Stream16, Bf16Weights> {
  using type = Ring16;
};
template <>
struct RingFor<Stream8, Fp8Weights> {
  using type = Ring8Fp8;
};
template <>
struct RingFor<Stream16, Fp8Weights> {
  using type = Ring16Fp8;
};
template <>
struct RingFor<Stream8, Nvfp4Weights> {
  using type = Ring8Nvfp4;
};
template <>
struct RingFor<Stream16, Nvfp4Weights> {
  using type = Ring16Nvfp4;
};

// Calls fn with the weight format (Bf16Weights{}, Fp8Weights{} or Nvfp4Weights{}) of p's BF16-shape weights.
template <class Fn>
decltype(auto) visit_weights(const LinearParams& p, Fn&& fn) {
  if (p.w_type == LinearWeights::kFp8) return fn(Fp8Weights{});
  if (p.w_type == LinearWeights::kNvfp4) return fn(Nvfp4Weights{});
  return fn(Bf16Weights{});
}

// The most rows one block of linear_stream_ring_kernel<R> stages, which its shared memory is sized for: a plain
// product's rows, or the largest tile of a grouped one.
template <class R>
int ring_rows(const LinearParams& p) {
  if (p.tiles == nullptr) return p.rows;
  return p.tile_rows > 0 ? std::min(p.tile_rows, R::kRows) : R::kRows;
}

// The blocks of p on linear_stream_ring_kernel<R>.
template <class R>
int64_t ring_blocks(const LinearParams& p) {
  return static_cast<int64_t>((p.n + 16 * R::kWarps - 1) / (16 * R::kWarps)) * p.max_tiles * p.k_split;
}

// Whether a product goes to linear_stream_ring_kernel<R> (launch_choices.h).
template <class R>
bool ring_fits(const LinearParams& p) {
  if (p.tiles == nullptr ? p.rows > R::kRows : p.tile_rows > R::kRows) return false;
  return linear_ring_holds_all_blocks(ring_blocks<R>(p), R::ring_bytes(ring_rows<R>(p)), device_limits());
}

// Launches p on linear_stream_ring_kernel<R>.
template <class R, bool kVec, bool kGrouped, KernelFault kFault>
void launch_ring(const LinearParams& p, cudaStream_t stream) {
  static std::atomic<uint64_t> ring_smem_allowed{0};
  const auto kernel = linear_stream_ring_kernel<R, kVec, kGrouped, kFault>;
  allow_smem(reinterpret_cast<const void*>(kernel), R::ring_bytes(R::kRows), ring_smem_allowed);
  launch_kernel(kernel, static_cast<unsigned>(ring_blocks<R>(p)), 32 * R::kWarps, R::ring_bytes(ring_rows<R>(p)),
                stream, p);
}

template <class S, class W, bool kVec, KernelFault kFault>
void launch_stream(const LinearParams& p, cudaStream_t stream) {
  using R = typename RingFor<S, W>::type;
  if constexpr (!std::is_void_v<R>) {
    if (p.stream_kernel == LinearStreamKernel::kSharedRing ||
        (p.stream_kernel == LinearStreamKernel::kByOccupancy && ring_fits<R>(p))) {
      if (p.tiles != nullptr) {
        launch_ring<R, kVec, true, kFault>(p, stream);
      } else {
        launch_ring<R, kVec, false, kFault>(p, stream);
      }
      return;
    }
  }
  static std::atomic<uint64_t> smem_allowed{0};
  const auto kernel = linear_stream_kernel<S, W, kVec, kFault>;
  allow_smem(reinterpret_cast<const void*>(kernel), S::kSmemBytes, smem_allowed);
  const int warps = stream_warps(p);
  const int64_t blocks = static_cast<int64_t>((p.n + 16 * warps - 1) / (16 * warps)) * p.max_tiles * p.k_split;
  launch_kernel(kernel, static_cast<unsigned>(blocks), 32 * warps, S::kSmemBytes, stream, p);
}

// FP8 and NVFP4 weights carry their own planted controls and the production kernel only: the other controls check
// the code they share with BF16 there.
template <class S, bool kVec>
void launch_stream_fault(const LinearParams& p, KernelFault fault, cudaStream_t stream) {
  if (p.w_type == LinearWeights::kFp8) {
    dispatch_fault<KernelFault::kLinearFp8ScaleNextSlice>(
        fault, [&](auto planted) { launch_stream<S, Fp8Weights, kVec, decltype(planted)::value>(p, stream); });
    return;
  }
  if (p.w_type == LinearWeights::kNvfp4) {
    dispatch_fault<KernelFault::kLinearNvfp4NibblesSwapped, KernelFault::kLinearNvfp4ScaleNextGroup>(
        fault, [&](auto planted) { launch_stream<S, Nvfp4Weights, kVec, decltype(planted)::value>(p, stream); });
    return;
  }
  dispatch_fault<KernelFault::kLinearDropsLastKTile, KernelFault::kLinearSplitFoldsReversed,
                 KernelFault::kLinearSplitDropsSlice, KernelFault::kLinearPartsSkipBoundary>(
      fault, [&](auto planted) { launch_stream<S, Bf16Weights, kVec, decltype(planted)::value>(p, stream); });
}

// Static shared memory of a kernel (the same in every instantiation of its template).
int static_smem(const void* kernel) {
  cudaFuncAttributes attributes{};
  cudaFuncGetAttributes(&attributes, kernel);
  return static_cast<int>(attributes.sharedSizeBytes);
}

// linear_stream_refusal for weights W.
template <class S, class W>
const char* stream_refusal(const LinearParams& p) {
  using R = typename RingFor<S, W>::type;
  switch (p.stream_kernel) {
    case LinearStreamKernel::kByOccupancy:
      if (p.stream_warps != 0) return "a forced warp count needs the register-ring kernel forced too";
      break;
    case LinearStreamKernel::kRegisterRing:
      if (p.stream_warps < 0 || p.stream_warps > kStreamMaxWarps)
        return "the register-ring kernel runs 1 to 4 warps a block (0: by the GPU's size)";
      break;
    case LinearStreamKernel::kSharedRing:
      if constexpr (std::is_void_v<R>) {
        return "the shared-memory ring kernel serves kStream8 and kStream16 only";
      } else {
        if (p.stream_warps != 0) return "the shared-memory ring kernel's warps per block are fixed by its shape";
        if (p.tiles == nullptr ? p.rows > R::kRows : p.tile_rows > R::kRows)
          return "the shared-memory ring kernel of this shape takes fewer rows";
        const void* kernel =
            reinterpret_cast<const void*>(linear_stream_ring_kernel<R, true, false, KernelFault::kNone>);
        if (R::ring_bytes(ring_rows<R>(p)) + static_smem(kernel) > block_smem_limit())
          return "the shared-memory ring kernel needs more shared memory than this GPU gives a block";
        return nullptr;
      }
  }
  const void* kernel = reinterpret_cast<const void*>(linear_stream_kernel<S, W, true, KernelFault::kNone>);
  if (S::kSmemBytes + static_smem(kernel) > block_smem_limit())
    return "the register-ring kernel of this shape needs more shared memory than this GPU gives a block";
  return nullptr;
}

}  // namespace

template <class S>
const char* linear_stream_refusal(const LinearParams& p) {
  return visit_weights(p, [&](auto weights) { return stream_refusal<S, decltype(weights)>(p); });
}
template const char* linear_stream_refusal<Stream8>(const LinearParams&);
template const char* linear_stream_refusal<Stream16>(const LinearParams&);
template const char* linear_stream_refusal<Stream32>(const LinearParams&);
template const char* linear_stream_refusal<Stream64>(const LinearParams&);

template <class S>
void launch_linear_stream(const LinearParams& p, bool vec, KernelFault fault, cudaStream_t stream) {
  if (vec) {
    launch_stream_fault<S, true>(p, fault, stream);
  } else {
    launch_stream_fault<S, false>(p, fault, stream);
  }
}
template void launch_linear_stream<Stream8>(const LinearParams&, bool, KernelFault, cudaStream_t);
template void launch_linear_stream<Stream16>(const LinearParams&, bool, KernelFault, cudaStream_t);
template void launch_linear_stream<Stream32>(const LinearParams&, bool, KernelFault, cudaStream_t);
template void launch_linear_stream<Stream64>(const LinearParams&, bool, KernelFault, cudaStream_t);

template <class S>
int linear_stream_ring_smem_bytes(int rows) {
  using R = typename RingFor<S, Bf16Weights>::type;
  if constexpr (std::is_void_v<R>) {
    return 0;
  } else {
    return R::ring_bytes(rows);
  }
}
template int linear_stream_ring_smem_bytes<Stream8>(int);
template int linear_stream_ring_smem_bytes<Stream16>(int);
template int linear_stream_ring_smem_bytes<Stream32>(int);
template int linear_stream_ring_smem_bytes<Stream64>(int);

}  // namespace plumb::cuda::linear_detail
