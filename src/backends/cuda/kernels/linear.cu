// Matrix products: tensor cores for BF16 weights, CUDA cores for F32 weights. linear.h states the contract.
//
// Two BF16 kernels share one per-element arithmetic (mma_chunk over ascending 32-wide k-chunks into one F32
// accumulator), so which one runs, and with how many warps, changes speed only:
// - linear_stream_kernel (decode, up to 64 rows): each warp owns 16 output features and every row of the tile, and
//   streams its weights from global memory straight into a ring of registers in the mma fragment layout, many
//   16-byte loads ahead; the block's warps share activation slabs staged in shared memory with cp.async.
// - linear_bf16_kernel (prefill): a block of warps multiplies a feature tile by a row tile, both operands streamed
//   through a ring of shared-memory stages with cp.async.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/kernels/linear.h"

namespace plumb::cuda {
namespace {

// ---- The per-element arithmetic, shared by every BF16 shape. ----
//
// A k-chunk is 32 consecutive k. For each weight row and product row it works on, lane (g = lane / 4, q = lane % 4)
// holds the 8 consecutive k at chunk offset 8q (one 16-byte read). The chunk is two m16n8k16 steps: step s puts
// k 8q + 4s + {0, 1} into fragment slots 2q + {0, 1} and k 8q + 4s + {2, 3} into slots 2q + 8 + {0, 1}, in A
// (weights) and B (activations) alike, so every k of a chunk meets its partner in one slot of one step.
constexpr int kChunkK = 32;

// d += a·b over one 16 x 8 x 16 step. a: weight rows g and g + 8; b: product row g; d: features g and g + 8 of product
// rows 2q and 2q + 1.
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One chunk of one 16-feature by 8-row tile. w_lo, w_hi: the lane's 8 k of weight rows g and g + 8; x: its 8 k of
// product row g; each as four BF16 pairs, lower k in the low half.
__device__ __forceinline__ void mma_chunk(float (&d)[4], const uint4& w_lo, const uint4& w_hi, const uint4& x) {
  mma_16816(d, w_lo.x, w_hi.x, w_lo.y, w_hi.y, x.x, x.y);
  mma_16816(d, w_lo.z, w_hi.z, w_lo.w, w_hi.w, x.z, x.w);
}

// Two F32 values as a BF16 pair rounded to nearest even, `lo` in the low half: the bits to_bf16_kernel stores.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
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

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // With a source size of 0 nothing is read and the 16 bytes are zero-filled.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
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

// A tiled BF16 launch shape: kWarpsM x kWarpsN warps, each multiplying kMTiles 16-feature tiles by kNTiles 8-row tiles;
// stages of kChunks k-chunks, kStages of them in the ring; activations staged as XElem (float, or uint16_t BF16 bits).
template <int kWarpsM_, int kWarpsN_, int kMTiles_, int kNTiles_, int kChunks_, int kStages_, typename XElem_,
          int kMinBlocks_>
struct Bf16Shape {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kMTiles = kMTiles_, kNTiles = kNTiles_;
  static constexpr int kChunks = kChunks_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  using XElem = XElem_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kFeatures = 16 * kMTiles * kWarpsM;  // output features per block
  static constexpr int kRows = 8 * kNTiles * kWarpsN;       // product rows per block (the row tile)
  static constexpr int kStageK = kChunkK * kChunks;
  static constexpr int kUnitsW = kStageK * 2 / 16;  // 16-byte units per staged weight row
  static constexpr int kUnitsX = kStageK * static_cast<int>(sizeof(XElem)) / 16;
  static constexpr int kBytesW = kFeatures * kUnitsW * 16;
  static constexpr int kStageBytes = kBytesW + kRows * kUnitsX * 16;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kUnitsW % 8 == 0 && kUnitsX % 8 == 0, "the swizzle needs rows of whole 128-byte windows");
  static_assert(kFeatures * kUnitsW % kThreads == 0 && kRows * kUnitsX % kThreads == 0, "even staging loops");
  static_assert(kStages >= 2, "a ring needs two stages");
};

// Weight streaming (decode): each warp multiplies 16 features by kNTiles 8-row tiles. Its weights go from global
// memory into a ring of kRing chunks of registers (8 per chunk), refilled as each chunk is used, so every warp keeps
// kRing KB of loads in flight and never waits on a barrier for them. Activations arrive a slab of kRing chunks at a
// time in shared memory, two slabs deep, shared by the block's warps (1 to kStreamMaxWarps, chosen at launch).
// XElem float: the F32 activations themselves, rounded to BF16 when the fragment is built; uint16_t: BF16 bits made
// by to_bf16_kernel, so large row tiles move half the bytes.
template <int kNTiles_, int kRing_, typename XElem_>
struct StreamShape {
  static constexpr int kNTiles = kNTiles_, kRing = kRing_;
  using XElem = XElem_;
  static constexpr int kRows = 8 * kNTiles;  // product rows per block (the row tile)
  static constexpr int kSlabK = kChunkK * kRing;
  static constexpr int kUnitsX = kSlabK * static_cast<int>(sizeof(XElem)) / 16;  // 16-byte units per slab row
  static constexpr int kSlabBytes = kRows * kUnitsX * 16;
  static constexpr int kSmemBytes = 2 * kSlabBytes;
  static_assert(kUnitsX % 8 == 0, "the swizzle needs rows of whole 128-byte windows");
};
constexpr int kStreamMaxWarps = 4;
// Slabs of 32-64 KB in all: with the register ring (~128-160 registers a thread) three blocks of four warps fit a
// multiprocessor, 12 warps with 12 x 8-16 KB of weight loads in flight.
using Stream8 = StreamShape<1, 12, float>;
using Stream16 = StreamShape<2, 12, float>;
using Stream32 = StreamShape<4, 8, uint16_t>;
using Stream64 = StreamShape<8, 8, uint16_t>;
// Tiled GEMM (prefill): 2 x 2 warps of 32 x 64 or 64 x 64, 64 k per stage, three stages.
using Tiled64 = Bf16Shape<2, 2, 2, 8, 2, 3, uint16_t, 2>;
using Tiled128 = Bf16Shape<2, 2, 4, 8, 2, 3, uint16_t, 2>;

// ---- Which block does what. ----

// Block b -> (feature block, row tile). Groups of kRasterGroup feature blocks take every row tile in turn, so a
// group's weights stay in L2 while the activation tiles stream past them.
constexpr int kRasterGroup = 8;
struct BlockTile {
  int feature_block;
  int tile;
};
__device__ __forceinline__ BlockTile block_tile(int feature_blocks, int max_tiles) {
  const int b = static_cast<int>(blockIdx.x);
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

// ---- The BF16 kernel. ----

// Stages k [k0, k0 + kStageK) of the block's weight rows (the first `features` valid) and product rows into
// `stage`. Padding rows (x_offset[r] < 0) are left unwritten: compute_stage never reads them.
template <class S, bool kVec>
__device__ __forceinline__ void load_stage(const uint16_t* w, int features, const typename S::XElem* x,
                                           const int64_t* x_offset, int k, int k0, char* stage) {
  using XElem = typename S::XElem;
  constexpr int kPerUnitX = 16 / static_cast<int>(sizeof(XElem));
#pragma unroll
  for (int j = 0; j < S::kFeatures * S::kUnitsW / S::kThreads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * S::kThreads;
    const int r = i / S::kUnitsW, u = i % S::kUnitsW;
    const uint16_t* row = r < features ? w + static_cast<int64_t>(r) * k : nullptr;
    stage_unit<uint16_t, kVec>(stage + tile_offset<uint16_t>(r, u, S::kUnitsW), row, w, k0 + u * 8, k);
  }
#pragma unroll
  for (int j = 0; j < S::kRows * S::kUnitsX / S::kThreads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * S::kThreads;
    const int r = i / S::kUnitsX, u = i % S::kUnitsX;
    if (x_offset[r] < 0) continue;
    stage_unit<XElem, kVec>(stage + S::kBytesW + tile_offset<XElem>(r, u, S::kUnitsX), x + x_offset[r], x,
                            k0 + u * kPerUnitX, k);
  }
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

// Runs the stage's first `chunks` chunks (all when more) on this warp's tiles. Product rows from `rows` on are
// padding: their operand is zero, which only their own (unstored) outputs see.
template <class S>
__device__ __forceinline__ void compute_stage(const char* stage, int chunks, int rows,
                                              float (&acc)[S::kMTiles][S::kNTiles][4]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int wm = warp % S::kWarpsM, wn = warp / S::kWarpsM;
  const char* stage_x = stage + S::kBytesW;
#pragma unroll
  for (int c = 0; c < S::kChunks; ++c) {
    if (c >= chunks) break;
    uint4 w_lo[S::kMTiles], w_hi[S::kMTiles];
#pragma unroll
    for (int mt = 0; mt < S::kMTiles; ++mt) {
      const int row = (wm * S::kMTiles + mt) * 16 + g;
      w_lo[mt] = *reinterpret_cast<const uint4*>(stage + tile_offset<uint16_t>(row, 4 * c + q, S::kUnitsW));
      w_hi[mt] = *reinterpret_cast<const uint4*>(stage + tile_offset<uint16_t>(row + 8, 4 * c + q, S::kUnitsW));
    }
#pragma unroll
    for (int nt = 0; nt < S::kNTiles; ++nt) {
      const int row = (wn * S::kNTiles + nt) * 8 + g;
      const uint4 xv = row < rows ? x_fragment<S>(stage_x, row, c, q) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int mt = 0; mt < S::kMTiles; ++mt) mma_chunk(acc[mt][nt], w_lo[mt], w_hi[mt], xv);
    }
  }
}

template <class S, bool kVec, KernelFault kFault>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks) linear_bf16_kernel(const LinearParams p) {
  using XElem = typename S::XElem;
  extern __shared__ __align__(128) char smem[];  // kStages x [weights kFeatures x kStageK | rows kRows x kStageK]
  __shared__ int64_t x_offset[S::kRows];         // element offset of each product row's activations; -1: padding

  const int feature_blocks = (p.n + S::kFeatures - 1) / S::kFeatures;
  const BlockTile bt = block_tile(feature_blocks, p.max_tiles);
  RowTile rt;
  if (!row_tile(p, bt.tile, S::kRows, &rt)) return;
  for (int r = static_cast<int>(threadIdx.x); r < S::kRows; r += S::kThreads) {
    const int row = rt.begin + r;
    x_offset[r] = row < rt.end ? static_cast<int64_t>(p.x_index ? p.x_index[row] : row) * p.k : -1;
  }
  __syncthreads();

  const int feature0 = bt.feature_block * S::kFeatures;
  const int features = min(S::kFeatures, p.n - feature0);
  const uint16_t* w = static_cast<const uint16_t*>(p.w) + rt.group * p.w_group_stride +
                      static_cast<int64_t>(feature0) * p.k;  // [features, k]
  const auto* x = static_cast<const XElem*>(p.x);            // [x_rows, k]
  const int stages = (p.k + S::kStageK - 1) / S::kStageK;
  const int all_chunks = (p.k + kChunkK - 1) / kChunkK;
  // The planted control leaves the last chunk out of every reduction.
  const int chunks = kFault == KernelFault::kLinearDropsLastKTile ? all_chunks - 1 : all_chunks;

  float acc[S::kMTiles][S::kNTiles][4] = {};
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < stages) load_stage<S, kVec>(w, features, x, x_offset, p.k, s * S::kStageK, smem + s * S::kStageBytes);
    cp_async_commit();
  }
  for (int s = 0; s < stages; ++s) {
    // Stage s has landed for this thread; the barrier makes it everyone's and frees the buffer read last round.
    cp_async_wait<S::kStages - 2>();
    __syncthreads();
    const int next = s + S::kStages - 1;
    if (next < stages) {
      load_stage<S, kVec>(w, features, x, x_offset, p.k, next * S::kStageK,
                          smem + (next % S::kStages) * S::kStageBytes);
    }
    cp_async_commit();
    compute_stage<S>(smem + (s % S::kStages) * S::kStageBytes, chunks - s * S::kChunks, rt.end - rt.begin, acc);
  }

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int wm = warp % S::kWarpsM, wn = warp / S::kWarpsM;
  auto store = [&](int row, int feature, float v) {
    if (row < rt.end && feature < p.n) p.y[static_cast<int64_t>(row) * p.n + feature] = v;
  };
#pragma unroll
  for (int mt = 0; mt < S::kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < S::kNTiles; ++nt) {
      const int feature = feature0 + (wm * S::kMTiles + mt) * 16 + g;
      const int row = rt.begin + (wn * S::kNTiles + nt) * 8 + 2 * q;
      store(row, feature, acc[mt][nt][0]);
      store(row + 1, feature, acc[mt][nt][1]);
      store(row, feature + 8, acc[mt][nt][2]);
      store(row + 1, feature + 8, acc[mt][nt][3]);
    }
  }
}

// ---- The BF16 streaming kernel (decode). ----

// 16 bytes of weights that are read once: not kept in L1, and the whole 128-byte line fetched into L2 (the lane's
// neighbours in k read the rest of it within the same ring).
__device__ __forceinline__ uint4 load_streamed(const uint16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The lane's 8 k from kk of one weight row (nullptr: a feature past n), zero past k. kVec: one 16-byte load (row
// 16-byte aligned, k a multiple of 8, so the 8 k are all in or all out); otherwise element by element, the same bits.
template <bool kVec>
__device__ __forceinline__ uint4 weight_unit(const uint16_t* row, int kk, int k) {
  if (row == nullptr || kk >= k) return make_uint4(0, 0, 0, 0);
  if constexpr (kVec) {
    return load_streamed(row + kk);
  } else {
    uint32_t pair[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t lo = kk + 2 * e < k ? row[kk + 2 * e] : 0;
      const uint32_t hi = kk + 2 * e + 1 < k ? row[kk + 2 * e + 1] : 0;
      pair[e] = lo | hi << 16;
    }
    return make_uint4(pair[0], pair[1], pair[2], pair[3]);
  }
}

// One chunk of the lane's weights: its 8 k of weight rows g (lo) and g + 8 (hi), as mma_chunk takes them.
struct WeightChunk {
  uint4 lo, hi;
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
// product row of its row tile, chunk after chunk in ascending k: exactly the arithmetic of linear_bf16_kernel.
template <class S, bool kVec, KernelFault kFault>
__global__ void __launch_bounds__(32 * kStreamMaxWarps, 3) linear_stream_kernel(const LinearParams p) {
  using XElem = typename S::XElem;
  extern __shared__ __align__(128) char smem[];  // 2 slabs x [kRows x kSlabK] XElem
  __shared__ int64_t x_offset[S::kRows];         // element offset of each product row's activations

  const int warps = static_cast<int>(blockDim.x) / 32;
  const int block_features = 16 * warps;
  const BlockTile bt = block_tile((p.n + block_features - 1) / block_features, p.max_tiles);
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
  const int warp_feature0 = bt.feature_block * block_features + 16 * warp;
  // A warp wholly past n loads and multiplies nothing, but still stages activations and meets the barriers.
  const bool warp_active = warp_feature0 < p.n;
  const uint16_t* w = static_cast<const uint16_t*>(p.w) + rt.group * p.w_group_stride;  // [n, k]
  const int feature = warp_feature0 + g;
  const uint16_t* w_lo = feature < p.n ? w + static_cast<int64_t>(feature) * p.k : nullptr;          // [k]
  const uint16_t* w_hi = feature + 8 < p.n ? w + static_cast<int64_t>(feature + 8) * p.k : nullptr;  // [k]
  const auto* x = static_cast<const XElem*>(p.x);                                                    // [x_rows, k]
  const int all_chunks = (p.k + kChunkK - 1) / kChunkK;
  const int slabs = (all_chunks + S::kRing - 1) / S::kRing;
  // The planted control leaves the last chunk out of every reduction.
  const int chunks = kFault == KernelFault::kLinearDropsLastKTile ? all_chunks - 1 : all_chunks;

  // Slot i of the ring always holds a chunk c with c % kRing == i: chunk c + kRing is loaded the moment chunk c is
  // used, so the slot indices stay compile-time constants and the registers stay registers.
  WeightChunk ring[S::kRing];
#pragma unroll
  for (int i = 0; i < S::kRing; ++i) {
    const int kk = i * kChunkK + 8 * q;
    ring[i].lo = warp_active ? weight_unit<kVec>(w_lo, kk, p.k) : make_uint4(0, 0, 0, 0);
    ring[i].hi = warp_active ? weight_unit<kVec>(w_hi, kk, p.k) : make_uint4(0, 0, 0, 0);
  }
  // Each slab is one cp.async group, so waiting for all but the newest group waits for the slab about to be used.
  if (slabs > 0) stage_x_slab<S, kVec>(x, x_offset, rows, p.k, 0, smem);
  cp_async_commit();

  float acc[S::kNTiles][4] = {};
  for (int s = 0; s < slabs; ++s) {
    // Slab s + 1 goes into the buffer slab s - 1 used, which the barrier ending the last round freed.
    if (s + 1 < slabs) {
      stage_x_slab<S, kVec>(x, x_offset, rows, p.k, (s + 1) * S::kSlabK, smem + ((s + 1) % 2) * S::kSlabBytes);
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
#pragma unroll
          for (int nt = 0; nt < S::kNTiles; ++nt) {
            const int row = nt * 8 + g;
            const uint4 xv = row < rows ? x_fragment<S>(slab, row, i, q) : make_uint4(0, 0, 0, 0);
            mma_chunk(acc[nt], ring[i].lo, ring[i].hi, xv);
          }
        }
        const int kk = (c + S::kRing) * kChunkK + 8 * q;
        ring[i].lo = weight_unit<kVec>(w_lo, kk, p.k);
        ring[i].hi = weight_unit<kVec>(w_hi, kk, p.k);
      }
    }
    // Everyone is done with slab s before the next round refills its buffer.
    __syncthreads();
  }

  if (!warp_active) return;
  auto store = [&](int row, int f, float v) {
    if (row < rt.end && f < p.n) p.y[static_cast<int64_t>(row) * p.n + f] = v;
  };
#pragma unroll
  for (int nt = 0; nt < S::kNTiles; ++nt) {
    const int row = rt.begin + nt * 8 + 2 * q;
    store(row, feature, acc[nt][0]);
    store(row + 1, feature, acc[nt][1]);
    store(row, feature + 8, acc[nt][2]);
    store(row + 1, feature + 8, acc[nt][3]);
  }
}

// ---- F32 weights (small test checkpoints). ----

// One thread per output feature and up to kF32Rows product rows. Each dot product runs the CPU reference's order:
// eight partial sums by k mod 8, every product and sum rounded on its own, combined pairwise.
constexpr int kF32Features = 128;
constexpr int kF32Rows = 8;

template <KernelFault kFault>
__global__ void __launch_bounds__(kF32Features) linear_f32_kernel(const LinearParams p) {
  const int feature_blocks = (p.n + kF32Features - 1) / kF32Features;
  const BlockTile bt = block_tile(feature_blocks, p.max_tiles);
  RowTile rt;
  if (!row_tile(p, bt.tile, kF32Rows, &rt)) return;
  const int feature = bt.feature_block * kF32Features + static_cast<int>(threadIdx.x);
  if (feature >= p.n) return;
  const float* w =
      static_cast<const float*>(p.w) + rt.group * p.w_group_stride + static_cast<int64_t>(feature) * p.k;  // [k]
  const auto* x = static_cast<const float*>(p.x);  // [x_rows, k]
  const float* xr[kF32Rows];                       // [k] each, nullptr past the tile
#pragma unroll
  for (int r = 0; r < kF32Rows; ++r) {
    const int row = rt.begin + r;
    xr[r] = row < rt.end ? x + static_cast<int64_t>(p.x_index ? p.x_index[row] : row) * p.k : nullptr;
  }
  // The planted controls leave the last 32-wide chunk out, as the BF16 kernel does, or the last k % 8 terms.
  const int k_end = kFault == KernelFault::kLinearDropsLastKTile
                        ? max(0, (p.k + kChunkK - 1) / kChunkK - 1) * kChunkK
                        : (kFault == KernelFault::kLinearF32DropsKRemainder ? p.k / 8 * 8 : p.k);
  float part[kF32Rows][8] = {};
  for (int k0 = 0; k0 < k_end; k0 += 8) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (k0 + j >= k_end) break;
      const float wv = w[k0 + j];
#pragma unroll
      for (int r = 0; r < kF32Rows; ++r) {
        if (xr[r] != nullptr) part[r][j] = __fadd_rn(part[r][j], __fmul_rn(xr[r][k0 + j], wv));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kF32Rows; ++r) {
    if (xr[r] == nullptr) continue;
    const float* s = part[r];
    const float sum = __fadd_rn(__fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3])),
                                __fadd_rn(__fadd_rn(s[4], s[5]), __fadd_rn(s[6], s[7])));
    p.y[static_cast<int64_t>(rt.begin + r) * p.n + feature] = sum;
  }
}

// ---- Activations to BF16. ----

constexpr int kConvertThreads = 256;

// The BF16 bits of a pair (`lo` in the low half) and of one value: rounded to nearest even, or truncated in the
// planted control.
template <KernelFault kFault>
__device__ __forceinline__ uint32_t convert_pair(float lo, float hi) {
  if constexpr (kFault == KernelFault::kLinearToBf16Truncates)
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
  return pack_bf16(lo, hi);
}
template <KernelFault kFault>
__device__ __forceinline__ uint16_t convert_one(float v) {
  if constexpr (kFault == KernelFault::kLinearToBf16Truncates) return static_cast<uint16_t>(__float_as_uint(v) >> 16);
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Four elements per thread; kVec: one 16-byte load and one 8-byte store.
template <bool kVec, KernelFault kFault>
__global__ void __launch_bounds__(kConvertThreads) to_bf16_kernel(const float* x, uint16_t* y, int64_t count) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kConvertThreads + threadIdx.x) * 4;
  if constexpr (kVec) {
    if (i >= count) return;
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    *reinterpret_cast<uint2*>(y + i) = make_uint2(convert_pair<kFault>(v.x, v.y), convert_pair<kFault>(v.z, v.w));
  } else {
    for (int64_t j = i; j < i + 4 && j < count; ++j) y[j] = convert_one<kFault>(x[j]);
  }
}

// ---- Launchers. ----

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Raises a kernel's dynamic shared-memory limit on the current device, once per device. The default limit is 48 KB
// less the kernel's static shared memory.
void allow_smem(const void* kernel, int bytes, std::atomic<uint64_t>& devices_done) {
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

template <class S>
struct IsStream : std::false_type {};
template <int kNTiles, int kRing, typename XElem>
struct IsStream<StreamShape<kNTiles, kRing, XElem>> : std::true_type {};

// Warps per streaming block: the most (up to kStreamMaxWarps) that still give every multiprocessor a block, so small
// products spread over the whole GPU while large ones share each activation slab among more warps.
int stream_warps(const LinearParams& p) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t warp_tiles = static_cast<int64_t>((p.n + 15) / 16) * p.max_tiles;
  int warps = kStreamMaxWarps;
  while (warps > 1 && warp_tiles / warps < sms) warps /= 2;
  return warps;
}

template <class S, bool kVec, KernelFault kFault>
void launch_bf16(const LinearParams& p, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_allowed{0};
  if constexpr (IsStream<S>::value) {
    const auto kernel = linear_stream_kernel<S, kVec, kFault>;
    allow_smem(reinterpret_cast<const void*>(kernel), S::kSmemBytes, smem_allowed);
    const int warps = stream_warps(p);
    const int64_t blocks = static_cast<int64_t>((p.n + 16 * warps - 1) / (16 * warps)) * p.max_tiles;
    kernel<<<static_cast<unsigned>(blocks), 32 * warps, S::kSmemBytes, stream>>>(p);
  } else {
    const auto kernel = linear_bf16_kernel<S, kVec, kFault>;
    allow_smem(reinterpret_cast<const void*>(kernel), S::kSmemBytes, smem_allowed);
    const int64_t blocks = static_cast<int64_t>((p.n + S::kFeatures - 1) / S::kFeatures) * p.max_tiles;
    kernel<<<static_cast<unsigned>(blocks), S::kThreads, S::kSmemBytes, stream>>>(p);
  }
}

template <class S, KernelFault kFault>
void launch_bf16_aligned(const LinearParams& p, cudaStream_t stream) {
  // 16-byte loads need every row of both operands 16-byte aligned; other k load element by element.
  const bool vec = p.k % 8 == 0 && p.w_group_stride % 8 == 0 && aligned16(p.w) && aligned16(p.x);
  if (vec) {
    launch_bf16<S, true, kFault>(p, stream);
  } else {
    launch_bf16<S, false, kFault>(p, stream);
  }
}

// The F32-weight kernel, as a shape for visit_shape.
struct F32Shape {
  static constexpr int kRows = kF32Rows;
  using XElem = float;
};

// Calls fn with a value of the shape type `shape` names.
template <class Fn>
decltype(auto) visit_shape(LinearShape shape, Fn&& fn) {
  switch (shape) {
    case LinearShape::kStream8:
      return fn(Stream8{});
    case LinearShape::kStream16:
      return fn(Stream16{});
    case LinearShape::kStream32:
      return fn(Stream32{});
    case LinearShape::kStream64:
      return fn(Stream64{});
    case LinearShape::kTiled64:
      return fn(Tiled64{});
    case LinearShape::kTiled128:
      return fn(Tiled128{});
    case LinearShape::kF32:
      break;
  }
  return fn(F32Shape{});
}

template <KernelFault kFault>
void launch_linear_variant(LinearParams p, cudaStream_t stream) {
  const int tile_rows = linear_tile_rows(p.shape);
  if (p.tiles == nullptr) p.max_tiles = (p.rows + tile_rows - 1) / tile_rows;
  if (p.n == 0 || p.max_tiles == 0) return;
  visit_shape(p.shape, [&](auto shape) {
    using S = decltype(shape);
    if constexpr (std::is_same_v<S, F32Shape>) {
      const int64_t blocks = static_cast<int64_t>((p.n + kF32Features - 1) / kF32Features) * p.max_tiles;
      linear_f32_kernel<kFault><<<static_cast<unsigned>(blocks), kF32Features, 0, stream>>>(p);
    } else {
      // A fault of the F32 kernel alone leaves the BF16 kernels at their production instantiation.
      constexpr KernelFault kBf16Fault = kFault == KernelFault::kLinearF32DropsKRemainder ? KernelFault::kNone : kFault;
      launch_bf16_aligned<S, kBf16Fault>(p, stream);
    }
  });
}

template <KernelFault kFault>
void launch_to_bf16_as(const float* x, uint16_t* y, int64_t count, cudaStream_t stream) {
  const int64_t blocks = (count + 4 * kConvertThreads - 1) / (4 * kConvertThreads);
  if (count % 4 == 0 && aligned16(x) && reinterpret_cast<uintptr_t>(y) % 8 == 0) {
    to_bf16_kernel<true, kFault><<<static_cast<unsigned>(blocks), kConvertThreads, 0, stream>>>(x, y, count);
  } else {
    to_bf16_kernel<false, kFault><<<static_cast<unsigned>(blocks), kConvertThreads, 0, stream>>>(x, y, count);
  }
}

}  // namespace

LinearShape choose_linear_shape(bool w_bf16, int64_t rows_per_matrix, int64_t total_rows, int64_t n, int sm_count) {
  if (!w_bf16) return LinearShape::kF32;
  if (rows_per_matrix <= 8) return LinearShape::kStream8;
  if (rows_per_matrix <= 16) return LinearShape::kStream16;
  if (rows_per_matrix <= 32) return LinearShape::kStream32;
  if (rows_per_matrix <= 64) return LinearShape::kStream64;
  // Wide tiles when they still give every multiprocessor two blocks.
  const int64_t wide_blocks =
      (n + Tiled128::kFeatures - 1) / Tiled128::kFeatures * ((total_rows + Tiled128::kRows - 1) / Tiled128::kRows);
  return wide_blocks >= 2 * static_cast<int64_t>(sm_count) ? LinearShape::kTiled128 : LinearShape::kTiled64;
}

int linear_tile_rows(LinearShape shape) {
  return visit_shape(shape, [](auto s) { return decltype(s)::kRows; });
}

bool linear_stages_bf16(LinearShape shape) {
  return visit_shape(shape, [](auto s) { return !std::is_same_v<typename decltype(s)::XElem, float>; });
}

void launch_linear(const LinearParams& params, KernelFault fault, cudaStream_t stream) {
  if (fault == KernelFault::kLinearDropsLastKTile) {
    launch_linear_variant<KernelFault::kLinearDropsLastKTile>(params, stream);
  } else if (fault == KernelFault::kLinearF32DropsKRemainder) {
    launch_linear_variant<KernelFault::kLinearF32DropsKRemainder>(params, stream);
  } else {
    launch_linear_variant<KernelFault::kNone>(params, stream);
  }
}

void launch_linear_to_bf16(const float* x, uint16_t* y, int64_t count, KernelFault fault, cudaStream_t stream) {
  if (count == 0) return;
  if (fault == KernelFault::kLinearToBf16Truncates) {
    launch_to_bf16_as<KernelFault::kLinearToBf16Truncates>(x, y, count, stream);
  } else {
    launch_to_bf16_as<KernelFault::kNone>(x, y, count, stream);
  }
}

}  // namespace plumb::cuda
