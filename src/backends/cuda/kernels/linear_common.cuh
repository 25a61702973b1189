// What the BF16 matrix-product kernels share (linear.cu: the tiled GEMM and the launchers; linear_stream.cu: the
// decode kernels): the per-element arithmetic, shared-memory staging, the launch shapes and the block-to-tile map.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/kernels/device_limits.h"
#include "backends/cuda/kernels/fault.h"
#include "backends/cuda/kernels/linear.h"
#include "backends/cuda/kernels/ptx.cuh"

namespace plumb::cuda::linear_detail {

// ---- The per-element arithmetic, shared by every BF16 shape. ----
//
// A k-chunk is 32 consecutive k. For each weight row and product row it works on, lane (g = lane / 4, q = lane % 4)
// holds the 8 consecutive k at chunk offset 8q (one 16-byte read). The chunk is two m16n8k16 steps: step s puts
// k 8q + 4s + {0, 1} into fragment slots 2q + {0, 1} and k 8q + 4s + {2, 3} into slots 2q + 8 + {0, 1}, in A
// (weights) and B (activations) alike, so every k of a chunk meets its partner in one slot of one step.
constexpr int kChunkK = 32;
// A K-slice (linear.h) is kSliceChunks whole chunks.
constexpr int kSliceK = kLinearSliceK;
constexpr int kSliceChunks = kSliceK / kChunkK;
static_assert(kSliceK % kChunkK == 0, "a slice is whole chunks");
// Slot-ordered activations (linear.h) come in row segments of 64 k: one 128-byte line of BF16, swizzled within.
constexpr int kSlotSegmentK = 64;

// One chunk of one 16-feature by 8-row tile (A: the weights, B: the activations). w_lo, w_hi: the lane's 8 k of weight
// rows g and g + 8; x: its 8 k of product row g; each as four BF16 pairs, lower k in the low half. d: features g and
// g + 8 of product rows 2q and 2q + 1.
__device__ __forceinline__ void mma_chunk(float (&d)[4], const uint4& w_lo, const uint4& w_hi, const uint4& x) {
  mma_bf16_16816(d, w_lo.x, w_hi.x, w_lo.y, w_hi.y, x.x, x.y);
  mma_bf16_16816(d, w_lo.z, w_hi.z, w_lo.w, w_hi.w, x.z, x.w);
}

// ---- Weight formats. ----
//
// What a kernel's weights are stored as (Elem, kPerElem weights each) and how a lane's 8 k of one row become the four
// BF16 pairs mma_chunk takes: 16 bytes of BF16 as they are, 8 bytes of E4M3 widened exactly (e4m3x2_to_bf16x2), or 4
// bytes of E2M1 codes and their group's E4M3 scale (nvfp4_to_bf16x4). kScaled: every slice's partial sums take the
// feature's multiplier as the slice ends (LinearParams::w_scales), one per slice (kScalePerSlice) or one for all.
struct Bf16Weights {
  using Elem = uint16_t;
  static constexpr int kPerElem = 1;
  static constexpr bool kScaled = false, kScalePerSlice = false, kGroupScaled = false;
  static constexpr LinearWeights kType = LinearWeights::kBF16;
};
struct Fp8Weights {
  using Elem = uint8_t;
  static constexpr int kPerElem = 1;
  static constexpr bool kScaled = true, kScalePerSlice = true, kGroupScaled = false;
  static constexpr LinearWeights kType = LinearWeights::kFp8;
};
struct Nvfp4Weights {
  using Elem = uint8_t;
  static constexpr int kPerElem = 2;
  static constexpr bool kScaled = true, kScalePerSlice = false, kGroupScaled = true;
  static constexpr LinearWeights kType = LinearWeights::kNvfp4;
};
// The k an NVFP4 group scale covers (core/tensor.h's kNvfp4GroupK).
constexpr int kNvfp4Group = 16;

// Eight weights of one row in their stored form: 16 bytes of BF16 (uint4), 8 of E4M3 (uint2), or E2M1's 4 bytes of
// codes (x, element 2j in the low nibble of byte j) with their group's E4M3 scale (y's low byte).
template <class W>
using WeightBits = std::conditional_t<std::is_same_v<W, Bf16Weights>, uint4, uint2>;

// Eight E2M1 codes (`codes`, element 2j in the low nibble of byte j) times their group's E4M3 scale as BF16 pairs,
// lower k in the low half; exact (at most 6 significant bits), through byte permutes rather than bit moves (about
// half the instructions; bench/linear/quantized_stream_arith times both). Each half of the codes is a prmt selector
// of four codes: a code's magnitude (its low 3 bits) picks the high and the low byte of its BF16 value from two
// 8-byte tables, and prmt's sign mode (a selector nibble with bit 3 set gives its byte's top bit replicated) picks
// 0xff for a negative code and 0x80 for a positive one from a table of 0x80s, so bit 6 of that byte is the code's
// sign; a third permute interleaves low and high bytes into pairs, and a BF16 multiply by the scale (exact) finishes
// each. kSwapNibbles: the planted control reads each byte's codes in the wrong order.
template <bool kSwapNibbles = false>
__device__ __forceinline__ uint4 nvfp4_to_bf16x4(uint32_t codes, uint32_t scale_code) {
  if constexpr (kSwapNibbles) codes = ((codes >> 4) & 0x0f0f0f0fu) | ((codes & 0x0f0f0f0fu) << 4);
  // BF16 of 0, 0.5, 1, 1.5, 2, 3, 4, 6: high bytes 00 3f 3f 3f 40 40 40 40, low bytes 00 00 80 c0 00 40 80 c0.
  constexpr uint32_t kHigh0 = 0x3f3f3f00u, kHigh1 = 0x40404040u, kLow0 = 0xc0800000u, kLow1 = 0xc0804000u;
  const uint32_t scale = e4m3x2_to_bf16x2(scale_code * 0x0101u);  // the scale in both halves
  const uint32_t magnitude = codes & 0x77777777u;
  uint32_t pair[4];
#pragma unroll
  for (int half = 0; half < 2; ++half) {  // codes 4 half to 4 half + 3
    const uint32_t m = magnitude >> (16 * half), c = codes >> (16 * half);
    const uint32_t sign = (prmt(0x80808080u, 0x80808080u, c) << 1) & 0x80808080u;
    const uint32_t high = prmt(kHigh0, kHigh1, m) | sign, low = prmt(kLow0, kLow1, m);
    const uint32_t first = prmt(low, high, 0x5140u), second = prmt(low, high, 0x7362u);
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(pair[2 * half]) : "r"(first), "r"(scale));
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(pair[2 * half + 1]) : "r"(second), "r"(scale));
  }
  return make_uint4(pair[0], pair[1], pair[2], pair[3]);
}

// The stored eight as BF16 pairs, lower k in the low half.
template <class W, bool kSwapNibbles = false>
__device__ __forceinline__ uint4 widen_weights(const WeightBits<W>& v) {
  if constexpr (W::kGroupScaled) {
    return nvfp4_to_bf16x4<kSwapNibbles>(v.x, v.y);
  } else if constexpr (W::kScaled) {
    return make_uint4(e4m3x2_to_bf16x2(v.x), e4m3x2_to_bf16x2(v.x >> 16), e4m3x2_to_bf16x2(v.y),
                      e4m3x2_to_bf16x2(v.y >> 16));
  } else {
    return v;
  }
}

// NVFP4: the group scales of row `feature` of group `group` from k0 on (nullptr past n, and for other weights). k0
// and the group stride are whole groups, so the offset is exact.
template <class W>
__device__ __forceinline__ const uint8_t* group_scale_row(const LinearParams& p, int group, int feature, int k0) {
  if constexpr (!W::kGroupScaled) return nullptr;
  if (feature >= p.n) return nullptr;
  return p.w_group_scales + (group * p.w_group_stride + static_cast<int64_t>(feature) * p.k + k0) / kNvfp4Group;
}

// A warp's multipliers for features `feature` (lo) and `feature` + 8 (hi) of group `group` (nullptr past n); 1 for
// unscaled weights, whose kernels never read them.
struct SliceScales {
  const float* lo;  // [slices] (FP8) or [1] (NVFP4), nullptr past n
  const float* hi;
};
template <class W>
__device__ __forceinline__ SliceScales slice_scales(const LinearParams& p, int group, int feature) {
  if constexpr (!W::kScaled) return {nullptr, nullptr};
  const int per_feature = W::kScalePerSlice ? (p.k + kSliceK - 1) / kSliceK : 1;
  const float* base = p.w_scales + static_cast<int64_t>(group) * p.n * per_feature;
  return {feature < p.n ? base + static_cast<int64_t>(feature) * per_feature : nullptr,
          feature + 8 < p.n ? base + static_cast<int64_t>(feature + 8) * per_feature : nullptr};
}

// ---- Shared-memory stages. ----

// Byte offset of 16-byte unit `unit` of row `row` in a tile of `units` units per row (a multiple of 8, so rows are
// whole 128-byte bank windows). The eight lanes of a quarter-warp read rows r and r + 1 (r even) at the same units:
// BF16 rows four consecutive units, F32 rows every other unit. The XOR moves row r + 1 onto the banks row r leaves
// free: it swaps 64-byte halves for BF16 and neighbouring units for F32.
template <typename Elem>
__device__ __forceinline__ int tile_offset(int row, int unit, int units) {
  constexpr int kSwizzle = sizeof(Elem) == 2 ? 4 : 1;
  return (row * units + (unit ^ ((row & 1) * kSwizzle))) * 16;
}

// Stages the 16-byte unit of `row` (nullptr: padding) at element kk into dst, zero past k. kVec: one cp.async (row
// 16-byte aligned, k a multiple of the unit); otherwise element by element, giving the same bytes.
template <typename Elem, bool kVec>
__device__ __forceinline__ void stage_unit(char* dst, const Elem* row, const Elem* any_valid, int kk, int k) {
  constexpr int kPerUnit = 16 / static_cast<int>(sizeof(Elem));
  if constexpr (kVec) {
    const bool valid = row != nullptr && kk < k;
    cp_async_16(dst, valid ? row + kk : any_valid, valid);
  } else {
    alignas(16) Elem v[kPerUnit];
#pragma unroll
    for (int e = 0; e < kPerUnit; ++e) v[e] = row != nullptr && kk + e < k ? row[kk + e] : Elem(0);
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
  }
}

// 16-byte units of a staged weight row of W in a tiled shape S's stage of kStageK: S's kUnitsW for BF16, half as
// many for FP8 (a stage's weights then fill half of their room).
template <class S, class W>
constexpr int kWeightUnits = S::kStageK* static_cast<int>(sizeof(typename W::Elem)) / 16;

// Stages k [k0, k0 + kStageK) of a tiled block's S::kFeatures weight rows (the first `features` valid, zero past
// them and past k) into `stage`, rows of kWeightUnits swizzled by tile_offset. Threads 0 .. S::kThreads - 1 share it.
template <class S, class W, bool kVec>
__device__ __forceinline__ void stage_weight_rows(const typename W::Elem* w, int features, int k, int k0, char* stage) {
  using WElem = typename W::Elem;
  constexpr int kUnitsW = kWeightUnits<S, W>, kPerUnitW = 16 / static_cast<int>(sizeof(WElem));
  static_assert(S::kFeatures * kUnitsW % S::kThreads == 0, "even staging loops");
#pragma unroll
  for (int j = 0; j < S::kFeatures * kUnitsW / S::kThreads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * S::kThreads;
    const int r = i / kUnitsW, u = i % kUnitsW;
    const WElem* row = r < features ? w + static_cast<int64_t>(r) * k : nullptr;
    stage_unit<WElem, kVec>(stage + tile_offset<WElem>(r, u, kUnitsW), row, w, k0 + u * kPerUnitW, k);
  }
}

// The lane's 8 k of chunk c of staged weight row `row`, as BF16 pairs in the fragment order.
template <class S, class W>
__device__ __forceinline__ uint4 weight_fragment(const char* stage, int row, int c, int q) {
  constexpr int kUnitsW = kWeightUnits<S, W>;
  if constexpr (W::kScaled) {
    // Chunk c's 32 bytes are units 2c and 2c + 1; the lane's 8 are half of one of them.
    const char* unit = stage + tile_offset<uint8_t>(row, 2 * c + q / 2, kUnitsW);
    return widen_weights<W>(*reinterpret_cast<const uint2*>(unit + (q % 2) * 8));
  } else {
    return *reinterpret_cast<const uint4*>(stage + tile_offset<uint16_t>(row, 4 * c + q, kUnitsW));
  }
}

// Weight streaming (decode): each warp multiplies 16 features by kNTiles 8-row tiles. Its weights go from global
// memory into a ring of kRing chunks of registers (8 per chunk), refilled as each chunk is used, so every warp keeps
// kRing KB of loads in flight and never waits on a barrier for them. Activations arrive a slab of kRing chunks at a
// time in shared memory, two slabs deep, shared by the block's warps (1 to kStreamMaxWarps, chosen at launch).
// XElem float: the F32 activations themselves, rounded to BF16 when the fragment is built; uint16_t: BF16 bits made
// by to_bf16_kernel, so large row tiles move half the bytes.
template <int kNTiles_, int kRing_, typename XElem_, int kMinBlocks_ = 3>
struct StreamShape {
  static constexpr int kNTiles = kNTiles_, kRing = kRing_, kMinBlocks = kMinBlocks_;
  using XElem = XElem_;
  static constexpr int kRows = 8 * kNTiles;  // product rows per block (the row tile)
  static constexpr int kSlabK = kChunkK * kRing;
  static constexpr int kUnitsX = kSlabK * static_cast<int>(sizeof(XElem)) / 16;  // 16-byte units per slab row
  static constexpr int kSlabBytes = kRows * kUnitsX * 16;
  static constexpr int kSmemBytes = 2 * kSlabBytes;
  static_assert(kUnitsX % 8 == 0, "the swizzle needs rows of whole 128-byte windows");
};
constexpr int kStreamMaxWarps = 4;
// Slabs of 32-64 KB in all: with the register ring (~128-165 registers a thread) three blocks of four warps fit a
// multiprocessor, 12 warps with 12 x 8-16 KB of weight loads in flight. Stream64's 64-row tiles keep a slice
// accumulator and a running sum of 32 registers each: two blocks, so that neither spills.
using Stream8 = StreamShape<1, 12, float>;
using Stream16 = StreamShape<2, 12, float>;
using Stream32 = StreamShape<4, 8, uint16_t>;
using Stream64 = StreamShape<8, 8, uint16_t, 2>;

// The warpgroup-MMA shape (prefill on Hopper; linear_wgmma.cu): a block of three warpgroups, warp-specialized. The
// first stages (Wgmma128Staging): it copies stages of 64 k into a ring of six and says when each has landed; the
// other two multiply, each 64 features by the block's 128 product rows, and say when they are done with a stage.
// Weights are staged row-major as the tiled shapes do and reach the tensor cores from registers (the lanes'
// mma_chunk fragments); activations, BF16 in slot order (linear.h), are staged in wgmma's K-major layout with the
// 128-byte swizzle, each row's 64 k one 128-byte line (unit u at u ^ (row mod 8)), and read from shared memory by the
// MMA itself. After the stages, two barriers a stage: landed (the staging warpgroup's 128 threads arrive) and freed
// (the 256 multiplying threads). The block's dynamic shared memory starts at its first kAlign boundary.
struct Wgmma128Shape {
  static constexpr int kThreads = 384, kFeatures = 128, kRows = 128, kStageK = 64, kStages = 6, kMinBlocks = 1;
  using XElem = uint16_t;
  static constexpr int kUnitsW = kStageK * 2 / 16;
  static constexpr int kUnitsX = kStageK * 2 / 16;
  static constexpr int kBytesW = kFeatures * kUnitsW * 16;
  static constexpr int kStageBytes = kBytesW + kRows * kUnitsX * 16;
  static constexpr int kBarrierBytes = 2 * kStages * 8;
  static constexpr int kAlign = 1024;
  static constexpr int kSmemBytes = kAlign + kStages * kStageBytes + kBarrierBytes;
  static_assert(kStageK == kSlotSegmentK && kBytesW % kAlign == 0 && kStageBytes % kAlign == 0,
                "a stage's rows are whole slot-order segments, each stage's activations on a swizzle period");
};
// The staging warpgroup of Wgmma128Shape, as stage_weight_rows takes a shape: its threads share a stage's copies.
struct Wgmma128Staging {
  static constexpr int kThreads = 128, kFeatures = Wgmma128Shape::kFeatures, kStageK = Wgmma128Shape::kStageK;
};
// Launches the warpgroup-MMA shape; vec: 16-byte weight loads (see launch_bf16_aligned).
void launch_linear_wgmma(const LinearParams& p, bool vec, KernelFault fault, cudaStream_t stream);

// ---- Which block does what. ----

// Block b -> (feature block, row tile). Groups of kRasterGroup feature blocks take every row tile in turn, so a
// group's weights stay in L2 while the activation tiles stream past them.
constexpr int kRasterGroup = 8;
struct BlockTile {
  int feature_block;
  int tile;
};
__device__ __forceinline__ BlockTile block_tile(int b, int feature_blocks, int max_tiles) {
  const int per_group = kRasterGroup * max_tiles;
  const int group = b / per_group, first = group * kRasterGroup;
  const int size = min(kRasterGroup, feature_blocks - first);
  const int rem = b - group * per_group;
  return {first + rem % size, rem / size};
}

struct RowTile {
  int group;  // expert
  int begin;  // product rows [begin, end)
  int end;
};
// The block's row tile; false past the end of a grouped product's tile list (its grid covers the worst case).
__device__ __forceinline__ bool row_tile(const LinearParams& p, int tile, int tile_rows, RowTile* out) {
  if (p.tiles == nullptr) {
    *out = {0, tile * tile_rows, min(p.rows, tile * tile_rows + tile_rows)};
    return true;
  }
  if (tile >= *p.num_tiles) return false;
  *out = {p.tiles[3 * tile], p.tiles[3 * tile + 1], p.tiles[3 * tile + 2]};
  return true;
}

// What a tiled block (linear_bf16_kernel, linear_wgmma_kernel) works on: its row tile, its feature block's first
// feature and valid features, its weights [features, k], its stages of S::kStageK and the chunks its reductions take.
template <class W>
struct TiledBlock {
  RowTile rt;
  int feature0, features, stages, chunks;
  const typename W::Elem* w;
};
// Fills `x_offset` [S::kRows] (each product row's activations at x_offset[r], rows of x_row_length elements; -1 for
// padding) and `block`, with a barrier after; false (before any barrier) for a block past a grouped product's tiles.
template <class S, class W, KernelFault kFault>
__device__ __forceinline__ bool tiled_block(const LinearParams& p, int x_row_length, int64_t* x_offset,
                                            TiledBlock<W>* block) {
  const int feature_blocks = (p.n + S::kFeatures - 1) / S::kFeatures;
  const BlockTile bt = block_tile(static_cast<int>(blockIdx.x), feature_blocks, p.max_tiles);
  RowTile rt;
  if (!row_tile(p, bt.tile, S::kRows, &rt)) return false;
  for (int r = static_cast<int>(threadIdx.x); r < S::kRows; r += S::kThreads) {
    const int row = rt.begin + r;
    x_offset[r] = row < rt.end ? static_cast<int64_t>(p.x_index ? p.x_index[row] : row) * x_row_length : -1;
  }
  __syncthreads();
  const int feature0 = bt.feature_block * S::kFeatures;
  const int all_chunks = (p.k + kChunkK - 1) / kChunkK;
  // The planted control leaves the last chunk out of every reduction.
  *block = {
      rt,
      feature0,
      min(S::kFeatures, p.n - feature0),
      (p.k + S::kStageK - 1) / S::kStageK,
      kFault == KernelFault::kLinearDropsLastKTile ? all_chunks - 1 : all_chunks,
      static_cast<const typename W::Elem*>(p.w) + rt.group * p.w_group_stride + static_cast<int64_t>(feature0) * p.k};
  return true;
}

// The lane's 8 k of chunk c of staged product row `row`, as BF16 pairs in the fragment order.
template <class S>
__device__ __forceinline__ uint4 x_fragment(const char* stage_x, int row, int c, int q) {
  if constexpr (std::is_same_v<typename S::XElem, float>) {
    const auto lo = *reinterpret_cast<const float4*>(stage_x + tile_offset<float>(row, 8 * c + 2 * q, S::kUnitsX));
    const auto hi = *reinterpret_cast<const float4*>(stage_x + tile_offset<float>(row, 8 * c + 2 * q + 1, S::kUnitsX));
    return make_uint4(pack_bf16(lo.x, lo.y), pack_bf16(lo.z, lo.w), pack_bf16(hi.x, hi.y), pack_bf16(hi.z, hi.w));
  } else {
    return *reinterpret_cast<const uint4*>(stage_x + tile_offset<uint16_t>(row, 4 * c + q, S::kUnitsX));
  }
}

// ---- The slices of K (linear.h): ending one, and a split product's fold. ----

// The slices [begin, end) a block of a split product covers (all of them when k_split is 1).
struct SliceRange {
  int begin, end;
};
__device__ __forceinline__ SliceRange slice_range(const LinearParams& p, int group) {
  const int slices = (p.k + kSliceK - 1) / kSliceK;
  const int per = (slices + p.k_split - 1) / p.k_split;
  return {group * per, min(slices, group * per + per)};
}

// Hands store(row, feature, value) the elements of one 16-feature by 8-row accumulator tile that lie in rows
// [row0, row_end) and below feature n (the mma layout: features g and g + 8 of rows 2q and 2q + 1).
template <class Store>
__device__ __forceinline__ void for_tile(int n, int row0, int row_end, int feature, const float (&d)[4], Store store) {
  const int q = static_cast<int>(threadIdx.x) % 4;
  auto at = [&](int row, int f, float v) {
    if (row < row_end && f < n) store(row, f, v);
  };
  at(row0 + 2 * q, feature, d[0]);
  at(row0 + 2 * q + 1, feature, d[1]);
  at(row0 + 2 * q, feature + 8, d[2]);
  at(row0 + 2 * q + 1, feature + 8, d[3]);
}

// Stores a tile into `out` [*, n] (a split product's partial sums).
__device__ __forceinline__ void store_tile(float* out, int n, int row0, int row_end, int feature, const float (&d)[4]) {
  for_tile(n, row0, row_end, feature, d, [&](int row, int f, float v) { out[static_cast<int64_t>(row) * n + f] = v; });
}

// Stores output (row, f) of the product: into y, or into the part whose features hold f.
template <KernelFault kFault>
__device__ __forceinline__ void store_output(const LinearParams& p, int row, int f, float v) {
  if (p.part_count == 0) {
    p.y[static_cast<int64_t>(row) * p.n + f] = v;
    return;
  }
  int begin = 0;
#pragma unroll
  for (int j = 0; j < kLinearMaxParts; ++j) {
    if (f < p.part_end[j]) {
      // The planted control: a later part's first feature is left unwritten.
      if (kFault == KernelFault::kLinearPartsSkipBoundary && j > 0 && f == begin) return;
      p.part_y[j][static_cast<int64_t>(row) * (p.part_end[j] - begin) + (f - begin)] = v;
      return;
    }
    begin = p.part_end[j];
  }
}

// Stores a tile of the product's outputs.
template <KernelFault kFault>
__device__ __forceinline__ void store_output_tile(const LinearParams& p, int row0, int row_end, int feature,
                                                  const float (&d)[4]) {
  for_tile(p.n, row0, row_end, feature, d, [&](int row, int f, float v) { store_output<kFault>(p, row, f, v); });
}

// Starts a warp's running sums at -0, the identity of F32 addition, so that the first slice's sum is its partial sum
// exactly.
template <int kNTiles>
__device__ __forceinline__ void start_running_sums(float (&sum)[kNTiles][4]) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) sum[nt][i] = -0.0f;
}

// One slice's multipliers for a warp's features `feature` (lo) and `feature` + 8 (hi); unscaled weights never read
// them.
struct SliceMultipliers {
  float lo = 1.0f, hi = 1.0f;
};

// Slice `slice`'s multipliers (0 past n; none read past the last slice). The streaming kernels load them a slice ahead
// of its end, so that the end of a slice never waits on a load. The planted control takes the next slice's (the first
// slice's for the last).
template <class W, KernelFault kFault>
__device__ __forceinline__ SliceMultipliers slice_multipliers(const LinearParams& p, const SliceScales& scales,
                                                              int slice) {
  if constexpr (!W::kScaled) return {};
  const int slices = (p.k + kSliceK - 1) / kSliceK;
  if (slice >= slices) return {};
  const int at = !W::kScalePerSlice                                ? 0
                 : kFault == KernelFault::kLinearFp8ScaleNextSlice ? (slice + 1) % slices
                                                                   : slice;
  return {scales.lo != nullptr ? __ldg(scales.lo + at) : 0.0f, scales.hi != nullptr ? __ldg(scales.hi + at) : 0.0f};
}

// Ends slice `slice` of a tile: scaled weights multiply its accumulator `acc` by the features' multipliers `m` for the
// slice (acc[0], acc[1] are feature `feature`'s, acc[2], acc[3] feature + 8's); then it is added to the running sum
// `sum` (which starts at -0, the identity of F32 addition, so the first slice's sum is its partial sum exactly), or,
// in a split product, stored as the slice's partial sums for the fold; then it restarts from zero.
// Scaled weights: a slice's accumulator tile times its features' multipliers (acc[0], acc[1] feature `feature`'s,
// acc[2], acc[3] feature + 8's), one F32 product each, rounded to nearest.
template <class W>
__device__ __forceinline__ void scale_slice(const SliceMultipliers& m, float (&acc)[4]) {
  if constexpr (W::kScaled) {
    acc[0] = __fmul_rn(acc[0], m.lo);
    acc[1] = __fmul_rn(acc[1], m.lo);
    acc[2] = __fmul_rn(acc[2], m.hi);
    acc[3] = __fmul_rn(acc[3], m.hi);
  }
}

template <class W>
__device__ __forceinline__ void end_slice(const LinearParams& p, int slice, int row0, int row_end, int feature,
                                          const SliceMultipliers& m, float (&acc)[4], float (&sum)[4]) {
  scale_slice<W>(m, acc);
  if (p.k_split > 1) {
    store_tile(p.partials + static_cast<int64_t>(slice) * p.rows * p.n, p.n, row0, row_end, feature, acc);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) sum[i] = __fadd_rn(sum[i], acc[i]);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = 0.0f;
}

// A split product's epilogue, by every thread of the block: once the block's partial sums are visible device-wide,
// it counts itself in at its tile's arrival counter; the tile's last block adds every slice's partial sums in slice
// order into y for product rows [row_begin, row_end) and features [feature0, feature0 + features), and rezeroes the
// counter for the next launch. No block waits on another, and which block comes last changes no bit.
template <KernelFault kFault>
__device__ void fold_split_tile(const LinearParams& p, int tile_id, int row_begin, int row_end, int feature0,
                                int features) {
  __shared__ int is_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(p.arrivals + tile_id, 1) == p.k_split - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const int slices = (p.k + kSliceK - 1) / kSliceK;
  // The planted controls: the slices added last to first, or the last one left out.
  const int folded = kFault == KernelFault::kLinearSplitDropsSlice ? slices - 1 : slices;
  const int64_t slice_stride = static_cast<int64_t>(p.rows) * p.n;
  const int count = (row_end - row_begin) * features;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += static_cast<int>(blockDim.x)) {
    const int row = row_begin + i / features, feature = feature0 + i % features;
    const int64_t at = static_cast<int64_t>(row) * p.n + feature;
    float sum = -0.0f;
    for (int s = 0; s < folded; ++s) {
      const int slice = kFault == KernelFault::kLinearSplitFoldsReversed ? slices - 1 - s : s;
      // Written by other blocks: read from L2, past this multiprocessor's L1.
      sum = __fadd_rn(sum, __ldcg(p.partials + slice * slice_stride + at));
    }
    store_output<kFault>(p, row, feature, sum);
  }
  if (threadIdx.x == 0) p.arrivals[tile_id] = 0;
}

// ---- Launch helpers. ----

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Raises a kernel's dynamic shared-memory limit on the current device, once per device. The default limit is 48 KB
// less the kernel's static shared memory.
inline void allow_smem(const void* kernel, int bytes, std::atomic<uint64_t>& devices_done) {
  if (bytes <= 32 * 1024) return;
  int device = 0;
  cudaGetDevice(&device);
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (devices_done.load(std::memory_order_relaxed) & bit) != 0) return;
  // A failure surfaces at the launch that follows, which the caller checks.
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess) {
    devices_done.fetch_or(bit, std::memory_order_relaxed);
  }
}

// The most shared memory, static and dynamic together, a block may have on the current device.
inline int block_smem_limit() {
  return device_limits().smem_per_block_optin;
}

// Launches streaming shape S (Stream8 to Stream64, instantiated in linear_stream.cu). vec: 16-byte loads (see
// launch_bf16_aligned).
template <class S>
void launch_linear_stream(const LinearParams& p, bool vec, KernelFault fault, cudaStream_t stream);
// linear_launch_refusal for streaming shape S.
template <class S>
const char* linear_stream_refusal(const LinearParams& p);
// The dynamic shared memory of the ring kernel streaming shape S hands a plain product of `rows` rows to (0: none).
template <class S>
int linear_stream_ring_smem_bytes(int rows);

}  // namespace plumb::cuda::linear_detail
