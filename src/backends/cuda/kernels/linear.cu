// Matrix products: tensor cores for BF16 weights, CUDA cores for F32 weights. linear.h states the contract.
//
// Four BF16 kernels share one per-element arithmetic (linear.h: mma_chunk over ascending 32-wide k-chunks into an F32
// accumulator per 128-wide K-slice, the slices added in order; linear_common.cuh), so which one runs, with how many
// warps, and over how many blocks K is spread changes speed only:
// - linear_bf16_kernel (prefill, here): a block of warps multiplies a feature tile by a row tile, both operands
//   streamed through a ring of shared-memory stages with cp.async.
// - linear_wgmma_kernel (prefill on Hopper; linear_wgmma.cu): the same tiles on warpgroup MMA, each of its k16 steps
//   given the k of mma_chunk's matching step.
// - linear_stream_kernel and linear_stream_ring_kernel (decode, up to 64 rows; linear_stream.cu): each warp owns 16
//   output features and every row of the tile and streams its weights once, through registers or shared memory.
#include <algorithm>

#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/linear_common.cuh"

namespace plumb::cuda {
using namespace linear_detail;
namespace {

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

// Tiled GEMM (prefill): 2 x 4 warps of 32 x 32 or 64 x 32 (features x rows), 64 k per stage, three stages. Each
// thread keeps a slice accumulator and a running sum per output, so the warps' tiles are half the rows they would be
// with one accumulator.
using Tiled64 = Bf16Shape<2, 4, 2, 4, 2, 3, uint16_t, 2>;
using Tiled128 = Bf16Shape<2, 4, 4, 4, 2, 3, uint16_t, 1>;

// ---- The BF16 kernel. ----

// Stages k [k0, k0 + kStageK) of the block's weight rows (the first `features` valid) and product rows into
// `stage`. Padding rows (x_offset[r] < 0) are left unwritten: compute_stage never reads them.
template <class S, class W, bool kVec>
__device__ __forceinline__ void load_stage(const typename W::Elem* w, int features, const typename S::XElem* x,
                                           const int64_t* x_offset, int k, int k0, char* stage) {
  using XElem = typename S::XElem;
  constexpr int kPerUnitX = 16 / static_cast<int>(sizeof(XElem));
  stage_weight_rows<S, W, kVec>(w, features, k, k0, stage);
#pragma unroll
  for (int j = 0; j < S::kRows * S::kUnitsX / S::kThreads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * S::kThreads;
    const int r = i / S::kUnitsX, u = i % S::kUnitsX;
    if (x_offset[r] < 0) continue;
    stage_unit<XElem, kVec>(stage + S::kBytesW + tile_offset<XElem>(r, u, S::kUnitsX), x + x_offset[r], x,
                            k0 + u * kPerUnitX, k);
  }
}

// Runs the stage's first `chunks` chunks (all when more) on this warp's tiles. Product rows from `rows` on are
// padding: their operand is zero, which only their own (unstored) outputs see.
template <class S, class W>
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
      w_lo[mt] = weight_fragment<S, W>(stage, row, c, q);
      w_hi[mt] = weight_fragment<S, W>(stage, row + 8, c, q);
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

template <class S, class W, bool kVec, KernelFault kFault>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks) linear_bf16_kernel(const LinearParams p) {
  wait_for_prior_grid();
  using XElem = typename S::XElem;
  extern __shared__ __align__(128) char smem[];  // kStages x [weights kFeatures x kStageK | rows kRows x kStageK]
  __shared__ int64_t x_offset[S::kRows];         // element offset of each product row's activations; -1: padding

  TiledBlock<W> tb;
  if (!tiled_block<S, W, kFault>(p, p.k, x_offset, &tb)) return;
  const auto [rt, feature0, features, stages, chunks, w] = tb;
  const auto* x = static_cast<const XElem*>(p.x);  // [x_rows, k]

  static_assert(kSliceK % S::kStageK == 0, "a slice is whole stages");
  constexpr int kStagesPerSlice = kSliceK / S::kStageK;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4;
  const int wm = warp % S::kWarpsM, wn = warp / S::kWarpsM;
  SliceScales scales[S::kMTiles];
#pragma unroll
  for (int mt = 0; mt < S::kMTiles; ++mt)
    scales[mt] = slice_scales<W>(p, rt.group, feature0 + (wm * S::kMTiles + mt) * 16 + g);
  float acc[S::kMTiles][S::kNTiles][4] = {};
  float sum[S::kMTiles][S::kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < S::kMTiles; ++mt) start_running_sums(sum[mt]);
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < stages) load_stage<S, W, kVec>(w, features, x, x_offset, p.k, s * S::kStageK, smem + s * S::kStageBytes);
    cp_async_commit();
  }
  for (int s = 0; s < stages; ++s) {
    // Stage s has landed for this thread; the barrier makes it everyone's and frees the buffer read last round.
    cp_async_wait<S::kStages - 2>();
    __syncthreads();
    const int next = s + S::kStages - 1;
    if (next < stages) {
      load_stage<S, W, kVec>(w, features, x, x_offset, p.k, next * S::kStageK,
                             smem + (next % S::kStages) * S::kStageBytes);
    }
    cp_async_commit();
    compute_stage<S, W>(smem + (s % S::kStages) * S::kStageBytes, chunks - s * S::kChunks, rt.end - rt.begin, acc);
    // The end of a slice (the last may be short): its partial sums join the running sums, in slice order.
    if (s % kStagesPerSlice == kStagesPerSlice - 1 || s == stages - 1) {
#pragma unroll
      for (int mt = 0; mt < S::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < S::kNTiles; ++nt)
          end_slice<W>(p, s / kStagesPerSlice, 0, 0, 0,
                       slice_multipliers<W, kFault>(p, scales[mt], s / kStagesPerSlice), acc[mt][nt], sum[mt][nt]);
    }
  }

#pragma unroll
  for (int mt = 0; mt < S::kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < S::kNTiles; ++nt) {
      store_output_tile<kFault>(p, rt.begin + (wn * S::kNTiles + nt) * 8, rt.end,
                                feature0 + (wm * S::kMTiles + mt) * 16 + g, sum[mt][nt]);
    }
  }
}

// ---- F32 weights (small test checkpoints). ----

// One thread per output feature and up to kF32Rows product rows. Each dot product runs the CPU reference's order
// (cpu::sliced_dot): per K-slice eight partial sums by k mod 8, every product and sum rounded on its own, combined
// pairwise; the slices added in order.
constexpr int kF32Features = 128;
constexpr int kF32Rows = 8;

template <KernelFault kFault>
__global__ void __launch_bounds__(kF32Features) linear_f32_kernel(const LinearParams p) {
  wait_for_prior_grid();
  const int feature_blocks = (p.n + kF32Features - 1) / kF32Features;
  const BlockTile bt = block_tile(static_cast<int>(blockIdx.x), feature_blocks, p.max_tiles);
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
  float sum[kF32Rows];
#pragma unroll
  for (int r = 0; r < kF32Rows; ++r) sum[r] = -0.0f;
  for (int ks = 0; ks < k_end; ks += kSliceK) {
    const int slice_end = min(k_end, ks + kSliceK);
    float part[kF32Rows][8] = {};
    for (int k0 = ks; k0 < slice_end; k0 += 8) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (k0 + j >= slice_end) break;
        const float wv = w[k0 + j];
#pragma unroll
        for (int r = 0; r < kF32Rows; ++r) {
          if (xr[r] != nullptr) part[r][j] = __fadd_rn(part[r][j], __fmul_rn(xr[r][k0 + j], wv));
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kF32Rows; ++r) {
      const float* t = part[r];
      const float slice = __fadd_rn(__fadd_rn(__fadd_rn(t[0], t[1]), __fadd_rn(t[2], t[3])),
                                    __fadd_rn(__fadd_rn(t[4], t[5]), __fadd_rn(t[6], t[7])));
      sum[r] = __fadd_rn(sum[r], slice);
    }
  }
#pragma unroll
  for (int r = 0; r < kF32Rows; ++r) {
    if (xr[r] != nullptr) store_output<kFault>(p, rt.begin + r, feature, sum[r]);
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
  wait_for_prior_grid();
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kConvertThreads + threadIdx.x) * 4;
  if constexpr (kVec) {
    if (i >= count) return;
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    *reinterpret_cast<uint2*>(y + i) = make_uint2(convert_pair<kFault>(v.x, v.y), convert_pair<kFault>(v.z, v.w));
  } else {
    for (int64_t j = i; j < i + 4 && j < count; ++j) y[j] = convert_one<kFault>(x[j]);
  }
}

// Slot order (linear.h): one thread per BF16 pair of the output, y [rows, x_k]. Position p of a row's 32-wide chunk
// C holds k = 32 C + 8 t + 2 (2 s + h) + e, s = p / 16, c = p mod 16, t = (c mod 8) / 2, h = c / 8, e = c mod 2; a
// pair (e = 0, 1) is two neighbouring k, zero past k. The pair at output position o holds position p of the row,
// o and p within a 64-wide segment being units o / 8 and (o / 8) ^ (row mod 8).
template <KernelFault kFault>
__global__ void __launch_bounds__(kConvertThreads)
    to_bf16_slots_kernel(const float* x, uint32_t* y, int64_t rows, int k, int x_k) {
  wait_for_prior_grid();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kConvertThreads + threadIdx.x;  // the output pair
  const int pairs = x_k / 2;
  if (i >= rows * pairs) return;
  const int64_t row = i / pairs;
  const int o = 2 * static_cast<int>(i % pairs);
  const int p = o / kSlotSegmentK * kSlotSegmentK + ((o % kSlotSegmentK / 8) ^ static_cast<int>(row % 8)) * 8 + o % 8;
  const int s = p % kChunkK / 16, c = p % 16;
  // The planted control keeps natural order, so each step of the wgmma kernel sums k 16 j .. 16 j + 15.
  const int kk =
      kFault == KernelFault::kLinearSlotsNatural ? p : p / kChunkK * kChunkK + 8 * (c % 8 / 2) + 2 * (2 * s + c / 8);
  const float* xr = x + row * k;
  y[i] = convert_pair<kFault>(kk < k ? xr[kk] : 0.0f, kk + 1 < k ? xr[kk + 1] : 0.0f);
}

// ---- Launchers. ----

template <class S>
struct IsStream : std::false_type {};
template <int kNTiles, int kRing, typename XElem, int kMinBlocks>
struct IsStream<StreamShape<kNTiles, kRing, XElem, kMinBlocks>> : std::true_type {};

template <class S, class W, bool kVec, KernelFault kFault>
void launch_tiled(const LinearParams& p, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_allowed{0};
  const auto kernel = linear_bf16_kernel<S, W, kVec, kFault>;
  allow_smem(reinterpret_cast<const void*>(kernel), S::kSmemBytes, smem_allowed);
  const int64_t blocks = static_cast<int64_t>((p.n + S::kFeatures - 1) / S::kFeatures) * p.max_tiles;
  launch_kernel(kernel, static_cast<unsigned>(blocks), S::kThreads, S::kSmemBytes, stream, p);
}

template <class S, bool kVec, KernelFault kFault>
void launch_bf16(const LinearParams& p, cudaStream_t stream) {
  if constexpr (IsStream<S>::value) {
    launch_linear_stream<S>(p, kVec, kFault, stream);
  } else if constexpr (std::is_same_v<S, Wgmma128Shape>) {
    launch_linear_wgmma(p, kVec, kFault, stream);
  } else if (p.w_type == LinearWeights::kFp8) {
    // FP8 weights carry their own planted control and the production kernel only.
    constexpr KernelFault kFp8Fault = kFault == KernelFault::kLinearFp8ScaleNextSlice ? kFault : KernelFault::kNone;
    launch_tiled<S, Fp8Weights, kVec, kFp8Fault>(p, stream);
  } else {
    // The split faults are the streaming kernels' alone (the tiled kernel never splits K), and so are NVFP4's.
    constexpr bool kOtherFault =
        kFault == KernelFault::kLinearSplitFoldsReversed || kFault == KernelFault::kLinearSplitDropsSlice ||
        kFault == KernelFault::kLinearFp8ScaleNextSlice || kFault == KernelFault::kLinearNvfp4NibblesSwapped ||
        kFault == KernelFault::kLinearNvfp4ScaleNextGroup;
    launch_tiled<S, Bf16Weights, kVec, kOtherFault ? KernelFault::kNone : kFault>(p, stream);
  }
}

template <class S, KernelFault kFault>
void launch_bf16_aligned(const LinearParams& p, cudaStream_t stream) {
  // Whole-unit loads need every row of both operands 16-byte aligned (BF16: k a multiple of 8; FP8: of 16, for the
  // tiled kernels' 16-byte copies; NVFP4, whose codes always load whole, likewise for its activations); other k load
  // element by element.
  const int per_unit = p.w_type == LinearWeights::kBF16 ? 8 : 16;
  const bool vec = p.k % per_unit == 0 && p.w_group_stride % per_unit == 0 && aligned16(p.w) && aligned16(p.x);
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
    case LinearShape::kWgmma128:
      return fn(Wgmma128Shape{});
    case LinearShape::kF32:
      break;
  }
  return fn(F32Shape{});
}

template <KernelFault kFault>
void launch_linear_variant(LinearParams p, cudaStream_t stream) {
  const int tile_rows = linear_tile_rows(p.shape);
  if (p.tiles == nullptr) p.max_tiles = (p.rows + tile_rows - 1) / tile_rows;
  p.k_split = linear_k_split(p.k, p.k_split);
  if (p.n == 0 || p.max_tiles == 0) return;
  visit_shape(p.shape, [&](auto shape) {
    using S = decltype(shape);
    if constexpr (std::is_same_v<S, F32Shape>) {
      const int64_t blocks = static_cast<int64_t>((p.n + kF32Features - 1) / kF32Features) * p.max_tiles;
      constexpr bool kF32Fault = kFault == KernelFault::kLinearDropsLastKTile ||
                                 kFault == KernelFault::kLinearF32DropsKRemainder ||
                                 kFault == KernelFault::kLinearPartsSkipBoundary;
      launch_kernel(linear_f32_kernel < kF32Fault ? kFault : KernelFault::kNone >, static_cast<unsigned>(blocks),
                    kF32Features, 0, stream, p);
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
    launch_kernel(to_bf16_kernel<true, kFault>, static_cast<unsigned>(blocks), kConvertThreads, 0, stream, x, y, count);
  } else {
    launch_kernel(to_bf16_kernel<false, kFault>, static_cast<unsigned>(blocks), kConvertThreads, 0, stream, x, y,
                  count);
  }
}

}  // namespace

int linear_slices(int64_t k) {
  return static_cast<int>((k + kSliceK - 1) / kSliceK);
}

int32_t linear_k_split(int64_t k, int64_t requested) {
  const int64_t slices = linear_slices(k);
  if (requested <= 1 || slices <= 1) return 1;
  const int64_t per = (slices + std::min(requested, slices) - 1) / std::min(requested, slices);
  return static_cast<int32_t>((slices + per - 1) / per);
}

int64_t linear_row_tiles(const LinearParams& p) {
  if (p.tiles != nullptr) return p.max_tiles;
  const int tile_rows = linear_tile_rows(p.shape);
  return (p.rows + tile_rows - 1) / tile_rows;
}

int64_t linear_arrival_count(const LinearParams& p) {
  return static_cast<int64_t>((p.n + 15) / 16) * linear_row_tiles(p);
}

int64_t linear_partials_count(const LinearParams& p) {
  return static_cast<int64_t>(linear_slices(p.k)) * p.rows * p.n;
}

const char* linear_launch_refusal(const LinearParams& p) {
  if ((p.shape == LinearShape::kF32) != (p.w_type == LinearWeights::kF32))
    return p.w_type == LinearWeights::kF32 ? "F32 weights need the kF32 shape"
                                           : "BF16 and FP8 weights need a BF16 shape";
  const bool scaled = p.w_type == LinearWeights::kFp8 || p.w_type == LinearWeights::kNvfp4;
  if (scaled != (p.w_scales != nullptr))
    return p.w_scales ? "only FP8 and NVFP4 weights take multipliers" : "FP8 and NVFP4 weights need their multipliers";
  if ((p.w_type == LinearWeights::kNvfp4) != (p.w_group_scales != nullptr))
    return p.w_group_scales ? "only NVFP4 weights take group scales" : "NVFP4 weights need their group scales";
  if (p.w_type == LinearWeights::kNvfp4) {
    if (p.k % 16 != 0 || p.w_group_stride % 16 != 0) return "NVFP4 weights come in whole groups of 16 k";
    const LinearShape sh = p.shape;
    if (sh != LinearShape::kStream8 && sh != LinearShape::kStream16 && sh != LinearShape::kStream32 &&
        sh != LinearShape::kStream64)
      return "NVFP4 weights run on the streaming shapes only";
  }
  if (p.part_count < 0 || p.part_count > kLinearMaxParts) return "a product writes 0 to kLinearMaxParts parts";
  if (p.part_count > 0) {
    if (p.tiles != nullptr) return "only a plain product writes its output in parts";
    for (int j = 0; j < p.part_count; ++j)
      if (p.part_y[j] == nullptr || p.part_end[j] <= (j > 0 ? p.part_end[j - 1] : 0))
        return "every part needs an output and at least one feature";
    if (p.part_end[p.part_count - 1] != p.n) return "the parts must end at the product's last feature";
  }
  if (p.tiles != nullptr && (p.tile_rows < 0 || p.tile_rows > linear_tile_rows(p.shape)))
    return "a grouped product's tiles hold at most its shape's row tile of rows (tile_rows 0: that many)";
  return visit_shape(p.shape, [&](auto shape) -> const char* {
    using S = decltype(shape);
    if (p.k_split < 1) return "k_split counts blocks per tile: at least 1";
    if constexpr (IsStream<S>::value) {
      if (linear_k_split(p.k, p.k_split) > 1 && (p.partials == nullptr || p.arrivals == nullptr))
        return "a product with K spread over blocks needs its partial sums and arrival counters";
      return linear_stream_refusal<S>(p);
    } else {
      if (p.k_split != 1) return "only a streaming shape spreads K over blocks";
      if (p.stream_kernel != LinearStreamKernel::kByOccupancy || p.stream_warps != 0)
        return "only a streaming shape has a streaming kernel or warp count to force";
      if constexpr (std::is_same_v<S, Wgmma128Shape>) {
        if (!linear_wgmma_runs()) return "the warpgroup-MMA shape needs a Hopper GPU (sm_90) and a build for sm_90a";
      }
      if constexpr (!std::is_same_v<S, F32Shape>) {
        if (S::kSmemBytes + S::kRows * static_cast<int>(sizeof(int64_t)) > block_smem_limit())
          return "the tiled shape needs more shared memory than this GPU gives a block";
      }
      return nullptr;
    }
  });
}

std::vector<LinearVariant> linear_variants(LinearWeights w_type, int64_t rows, LinearRows layout) {
  std::vector<LinearVariant> candidates;
  if (w_type != LinearWeights::kF32) {
    for (LinearShape shape :
         {LinearShape::kStream8, LinearShape::kStream16, LinearShape::kStream32, LinearShape::kStream64}) {
      for (int32_t split : {1, 2, kLinearSplitEverySlice}) {
        for (int32_t warps = 1; warps <= kStreamMaxWarps; ++warps)
          candidates.push_back({shape, LinearStreamKernel::kRegisterRing, warps, split});
        candidates.push_back({shape, LinearStreamKernel::kSharedRing, 0, split});
      }
    }
    candidates.push_back({LinearShape::kTiled64, LinearStreamKernel::kByOccupancy, 0, 1});
    candidates.push_back({LinearShape::kTiled128, LinearStreamKernel::kByOccupancy, 0, 1});
    candidates.push_back({LinearShape::kWgmma128, LinearStreamKernel::kByOccupancy, 0, 1});
  } else {
    candidates.push_back({LinearShape::kF32, LinearStreamKernel::kByOccupancy, 0, 1});
  }
  std::vector<LinearVariant> runnable;
  for (const LinearVariant& v : candidates) {
    LinearParams p;
    p.shape = v.shape;
    p.stream_kernel = v.stream_kernel;
    p.stream_warps = v.stream_warps;
    p.w_type = w_type;
    // Any address: whether a variant runs does not depend on it.
    static const float any_scale = 1.0f;
    static const uint8_t any_group_scale = 0x38;
    const bool scaled = w_type == LinearWeights::kFp8 || w_type == LinearWeights::kNvfp4;
    p.w_scales = scaled ? &any_scale : nullptr;
    p.w_group_scales = w_type == LinearWeights::kNvfp4 ? &any_group_scale : nullptr;
    p.rows = static_cast<int32_t>(rows);
    // Any address: whether a variant runs a grouped product does not depend on its tiles (at most the shape's row
    // tile of rows each, as the grouping makes them).
    static const int32_t any_tiles[3] = {};
    if (layout == LinearRows::kGrouped) p.tiles = any_tiles;
    // Whether a split can run depends on the shape alone; its buffers are the caller's.
    if (linear_launch_refusal(p) == nullptr) runnable.push_back(v);
  }
  return runnable;
}

const char* linear_weights_name(LinearWeights w_type) {
  switch (w_type) {
    case LinearWeights::kF32:
      return "F32";
    case LinearWeights::kBF16:
      return "BF16";
    case LinearWeights::kFp8:
      return "FP8";
    case LinearWeights::kNvfp4:
      break;
  }
  return "NVFP4";
}

const char* linear_stream_kernel_name(LinearStreamKernel kernel) {
  switch (kernel) {
    case LinearStreamKernel::kRegisterRing:
      return "register ring";
    case LinearStreamKernel::kSharedRing:
      return "shared-memory ring";
    case LinearStreamKernel::kByOccupancy:
      break;
  }
  return "kernel by occupancy";
}

const char* linear_shape_name(LinearShape shape) {
  switch (shape) {
    case LinearShape::kStream8:
      return "stream8";
    case LinearShape::kStream16:
      return "stream16";
    case LinearShape::kStream32:
      return "stream32";
    case LinearShape::kStream64:
      return "stream64";
    case LinearShape::kTiled64:
      return "tiled64";
    case LinearShape::kTiled128:
      return "tiled128";
    case LinearShape::kWgmma128:
      return "wgmma128";
    case LinearShape::kF32:
      break;
  }
  return "f32";
}

int linear_tile_rows(LinearShape shape) {
  return visit_shape(shape, [](auto s) { return decltype(s)::kRows; });
}

int linear_tile_features(LinearShape shape) {
  return visit_shape(shape, [](auto s) {
    using S = decltype(s);
    if constexpr (requires { S::kFeatures; }) {
      return S::kFeatures;
    } else {
      return 0;
    }
  });
}

bool linear_stages_bf16(LinearShape shape) {
  return visit_shape(shape, [](auto s) { return !std::is_same_v<typename decltype(s)::XElem, float>; });
}

bool linear_stages_slot_order(LinearShape shape) {
  return shape == LinearShape::kWgmma128;
}

int64_t linear_slot_order_k(int64_t k) {
  return (k + kSlotSegmentK - 1) / kSlotSegmentK * kSlotSegmentK;
}

bool linear_wgmma_runs() {
#if PLUMB_CUDA_HAS_SM90A
  const DeviceLimits& device = device_limits();
  return device.major == 9 && device.minor == 0;
#else
  return false;
#endif
}

int linear_smem_bytes(LinearShape shape) {
  return visit_shape(shape, [](auto s) {
    using S = decltype(s);
    if constexpr (std::is_same_v<S, F32Shape>) {
      return 0;
    } else {
      return S::kSmemBytes;
    }
  });
}

int linear_ring_smem_bytes(LinearShape shape, int rows) {
  return visit_shape(shape, [rows](auto s) {
    using S = decltype(s);
    if constexpr (IsStream<S>::value) {
      return linear_stream_ring_smem_bytes<S>(rows);
    } else {
      return 0;
    }
  });
}

void launch_linear(const LinearParams& params, KernelFault fault, cudaStream_t stream) {
  dispatch_fault<KernelFault::kLinearDropsLastKTile, KernelFault::kLinearSplitFoldsReversed,
                 KernelFault::kLinearSplitDropsSlice, KernelFault::kLinearF32DropsKRemainder,
                 KernelFault::kLinearPartsSkipBoundary, KernelFault::kLinearFp8ScaleNextSlice,
                 KernelFault::kLinearNvfp4NibblesSwapped, KernelFault::kLinearNvfp4ScaleNextGroup>(
      fault, [&](auto planted) { launch_linear_variant<decltype(planted)::value>(params, stream); });
}

void launch_linear_to_bf16_slots(const float* x, uint16_t* y, int64_t rows, int64_t k, KernelFault fault,
                                 cudaStream_t stream) {
  const int64_t x_k = linear_slot_order_k(k);
  if (rows == 0 || k == 0) return;
  const int64_t blocks = (rows * x_k / 2 + kConvertThreads - 1) / kConvertThreads;
  dispatch_fault<KernelFault::kLinearToBf16Truncates, KernelFault::kLinearSlotsNatural>(fault, [&](auto planted) {
    launch_kernel(to_bf16_slots_kernel<decltype(planted)::value>, static_cast<unsigned>(blocks), kConvertThreads, 0,
                  stream, x, reinterpret_cast<uint32_t*>(y), rows, static_cast<int>(k), static_cast<int>(x_k));
  });
}

void launch_linear_to_bf16(const float* x, uint16_t* y, int64_t count, KernelFault fault, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_fault<KernelFault::kLinearToBf16Truncates>(
      fault, [&](auto planted) { launch_to_bf16_as<decltype(planted)::value>(x, y, count, stream); });
}

}  // namespace plumb::cuda
