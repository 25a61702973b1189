// The warpgroup-MMA product (prefill on Hopper): the contract of linear.h on wgmma, bit for bit the arithmetic of the
// mma.sync kernels.
//
// Why the bits are the same: a tensor-core step sums its 16 products and the accumulator as one operation, so what
// fixes its result is which 16 k it is given, not the instruction or the slots they sit in. bench/linear's
// tensor_core_bits measured this on the H200 (2026-12-04): m64n8k16 wgmma against m16n8k16 mma.sync with the same
// values in the same slots, 0 of 2 M outputs differ from zero, into a random accumulator and over a whole slice; the
// 16 k of each step in reversed slots, 0 differ; the steps' k sets exchanged (k 0-15 and 16-31 instead of the
// contract's interleaved sets), 46 % differ. So each step here must sum the contract's set: step 2c + s of a slice
// takes chunk c's k {8t + 4s + 0..3 : t = 0..3} (mma_chunk). The weights (the A operand, M = features) come from
// registers exactly as the mma.sync kernels load them; the activations (B, N = product rows) come from shared memory,
// where wgmma reads each step's 16 k as two consecutive 8-k units of a row. Laying each row out in slot order
// (linear.h, launch_linear_to_bf16_slots) puts step s's k in the units wgmma reads for it, in the slots the weights'
// registers give the same k. A stage holds each row's 64 k as one 128-byte line in the MMA's 128-byte swizzle, the
// order the slot-ordered rows already have in global memory, so every copy moves a whole line.
//
// A block (Wgmma128Shape) is warp-specialized, as Hopper's GEMMs are: warpgroup 0 only stages, warpgroups 1 and 2
// only multiply, so the copies, the MMAs and the slices' ends overlap without any thread doing two of them in turn.
// Warpgroup 1 + v multiplies features [64 v, 64 v + 64) of the block's 128 by its 128 product rows, its warp w the
// 16 features 16 w .. 16 w + 15 (the m16 fragment of mma.sync; the accumulator of m64n128 is, per warp, sixteen
// m16n8 tiles in mma.sync's layout, so the stores are the tiled kernels'). The staging warpgroup copies stages of
// 64 k (two chunks, four steps) with cp.async into a ring of six, keeping three stages of its copies in flight: once
// a stage's copies have landed it fences them for the async proxy and arrives at the stage's `landed` barrier. A
// plain product's activation tile comes instead as one box from the copy engine (TMA, activation_map), whose bytes
// count in at the same barrier; rows gathered or grouped by expert are copied by the staging threads. A
// multiplying warpgroup waits there, loads its weight fragments, issues the MMAs of a whole slice (two stages), waits
// for them once, arrives at the stages' `freed` barriers (which the staging warpgroup waits on before copying into
// the buffers again) and adds the slice, scaled, into running sums in registers; the other warpgroup's MMAs may run
// meanwhile (ncu finds the two mostly waiting together: docs/performance.md). The staging warpgroup gives up
// registers (setmaxnreg) so the multiplying ones hold the slice's accumulators, its fragments and the running sums
// without spilling.
//
// Speed (linear_bench, T = 4096, H100, 2026-12-07, d48b404): 353-414 TFLOP/s with BF16 weights and 323-364 with FP8
// at 12288 x 2048 and 2048 x 4096, against the tiled kernel's 168-177 and 113-115 and cuBLAS's 775-780.
#include <cudaTypedefs.h>

#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/linear_common.cuh"

namespace plumb::cuda::linear_detail {
namespace {

using S = Wgmma128Shape;
constexpr int kTiles = S::kRows / 8;  // m16n8 accumulator tiles a warp holds

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// d += a·b over one k16 step of the warpgroup: a the warp's m16n8k16 A fragment (mma.sync's registers), b the
// descriptor of the step's activations. Asynchronous: the caller fences before and waits after.
__device__ __forceinline__ void wgmma_step(float (&d)[kTiles][4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "
      "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),
        "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]),
        "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]),
        "+f"(d[15][3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}
#endif

// The descriptor of step j's activations in a stage: units 2j and 2j + 1 of every row, rows of one 128-byte line in
// the 128-byte swizzle (layout type 1: unit u of row r at unit u ^ (r mod 8) of its line, the stage 1024-byte
// aligned), groups of 8 rows 1024 bytes apart; the step's units start 32 j bytes into the line, and the MMA applies
// the swizzle to that address.
__device__ __forceinline__ uint64_t step_descriptor(const char* stage_x, int j) {
  constexpr uint64_t kRowGroups = 8 * 128, kSwizzle128 = 1;
  const uint64_t address = shared_address(stage_x + 32 * j);
  return ((address & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | ((kRowGroups >> 4) << 32) | (kSwizzle128 << 62);
}

// Issues the steps of a stage's first kChunks chunks, each chunk mma_chunk's two (pairs x, y of the rows, then z, w),
// as one group. They run while the caller goes on; the A registers and the accumulators are theirs until
// wait_for_steps.
template <int kChunks>
__device__ __forceinline__ void issue_steps(float (&acc)[kTiles][4], const uint4 (&lo)[2], const uint4 (&hi)[2],
                                            const char* stage_x) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    wgmma_step(acc, lo[c].x, hi[c].x, lo[c].y, hi[c].y, step_descriptor(stage_x, 2 * c));
    wgmma_step(acc, lo[c].z, hi[c].z, lo[c].w, hi[c].w, step_descriptor(stage_x, 2 * c + 1));
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_steps() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

// The activations' copies a staging thread makes a stage: in pass j, unit i % 8 of tile row i / 8, i = j kThreads +
// thread, so that eight lanes copy one row's 128-byte line, from global memory and into shared memory alike.
using Staging = Wgmma128Staging;
constexpr int kUnitPasses = S::kRows * S::kUnitsX / Staging::kThreads;
static_assert(S::kUnitsX == 8 && S::kRows * S::kUnitsX % Staging::kThreads == 0 && 3 * kUnitPasses <= 32,
              "whole lines a pass, and a 3-bit key a pass in one word");

// The swizzle keys of the staging thread's rows, 3 bits a pass: tile row r's units sit in shared memory at u ^ (r mod
// 8) and in its row g of x at u ^ (g mod 8), so the unit the thread stores at u comes from u ^ ((r ^ g) mod 8). Zero
// for a plain product (its tiles start at multiples of 128 rows); rows gathered or grouped by expert differ.
__device__ __forceinline__ uint32_t row_swizzle_keys(const LinearParams& p, const RowTile& rt) {
  uint32_t keys = 0;
#pragma unroll
  for (int j = 0; j < kUnitPasses; ++j) {
    const int r = (j * Staging::kThreads + static_cast<int>(threadIdx.x)) / S::kUnitsX;
    const int row = rt.begin + r;
    const int g = row < rt.end ? (p.x_index ? p.x_index[row] : row) : r;
    keys |= static_cast<uint32_t>((r ^ g) & 7) << (3 * j);
  }
  return keys;
}

// Stages k [k0, k0 + kStageK) of the block's product rows' slot-ordered activations (rows of x_k, whole 128-byte
// lines; x_offset[r] < 0 for padding, zero-filled) into stage_x, by the staging warpgroup's threads.
__device__ __forceinline__ void copy_stage_rows(const uint16_t* x, const int64_t* x_offset, uint32_t keys, int k0,
                                                char* stage_x) {
#pragma unroll
  for (int j = 0; j < kUnitPasses; ++j) {
    const int i = j * Staging::kThreads + static_cast<int>(threadIdx.x);
    const int r = i / S::kUnitsX, from = (i % S::kUnitsX) ^ static_cast<int>(keys >> (3 * j) & 7);
    const bool valid = x_offset[r] >= 0;
    cp_async_16(stage_x + 16 * i, valid ? x + x_offset[r] + k0 + 8 * from : x, valid);
  }
}

// The activation tile a stage holds, in bytes: what the copy engine's box brings (activation_map).
constexpr uint32_t kStageBytesX = S::kStageBytes - S::kBytesW;

// The stages in flight of the staging warpgroup's copies: it says stage s has landed once it has issued s + kLag.
// At most kStages - 2, or the multiplying warpgroups, which wait for both stages of a slice before freeing either,
// would wait on a stage the staging warpgroup cannot copy until they free one.
constexpr int kLag = 3;
static_assert(kLag <= S::kStages - 2, "the ring holds a slice beyond the copies in flight");
// The register budgets (setmaxnreg) of the staging and the multiplying warpgroups: within the block's 168 a thread
// (65536 / 384, rounded down to a multiple of 8) on average, 88 for the copies' addresses and 208 for the
// multiplying threads' 64 accumulators, 64 running sums and 32 fragment registers.
constexpr int kStagingRegisters = 88, kMultiplyingRegisters = 208;
static_assert(kStagingRegisters * 128 + kMultiplyingRegisters * 256 <= 65536, "the budgets fit the register file");

template <class W, bool kVec, KernelFault kFault>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks)
    linear_wgmma_kernel(const LinearParams p, const __grid_constant__ CUtensorMap x_map, bool x_by_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  wait_for_prior_grid();
  extern __shared__ __align__(128) char smem_unaligned[];
  // kStages x [weights | rows, slot order, swizzled], then the barriers, from the first 1024-byte boundary (the
  // swizzle's period, which the MMA reads from the address).
  char* smem = smem_unaligned + (S::kAlign - shared_address(smem_unaligned) % S::kAlign) % S::kAlign;
  __shared__ int64_t x_offset[S::kRows];  // element offset of each product row's activations; -1: padding
  uint64_t* landed = reinterpret_cast<uint64_t*>(smem + S::kStages * S::kStageBytes);  // [kStages]
  uint64_t* freed = landed + S::kStages;                                               // [kStages]
  constexpr int kMultiplyingThreads = S::kThreads - Staging::kThreads;
  if (threadIdx.x == 0) {
    for (int b = 0; b < S::kStages; ++b) {
      mbarrier_init(landed + b, Staging::kThreads);
      mbarrier_init(freed + b, kMultiplyingThreads);
    }
  }

  const int x_k = static_cast<int>((p.k + kSlotSegmentK - 1) / kSlotSegmentK * kSlotSegmentK);  // linear_slot_order_k
  TiledBlock<W> tb;
  // Its barrier also makes the initialized barriers everyone's.
  if (!tiled_block<S, W, kFault>(p, x_k, x_offset, &tb)) return;
  const auto [rt, feature0, features, stages, chunks, w] = tb;
  const auto* x = static_cast<const uint16_t*>(p.x);  // [x_rows, x_k]
  const auto buffer = [&](int s) { return smem + (s % S::kStages) * S::kStageBytes; };
  const auto round_parity = [](int s) { return static_cast<uint32_t>(s / S::kStages) & 1; };

  if (threadIdx.x < Staging::kThreads) {
    lower_register_budget<kStagingRegisters>();
    const uint32_t keys = x_by_map ? 0 : row_swizzle_keys(p, rt);
    // The thread's copies of stage s have landed: handed to the async proxy, and counted in at the stage's barrier.
    const auto say_landed = [&](int s) {
      fence_proxy_async_shared();
      mbarrier_arrive(landed + s % S::kStages);
    };
    for (int s = 0; s < stages; ++s) {
      // The buffer's previous stage, s - kStages, must be freed: its parity is its round's.
      if (s >= S::kStages) mbarrier_wait(freed + s % S::kStages, round_parity(s - S::kStages));
      char* stage = buffer(s);
      if (!x_by_map) {
        copy_stage_rows(x, x_offset, keys, s * S::kStageK, stage + S::kBytesW);
      } else if (threadIdx.x == 0) {
        // One box of the tile's rows by the stage's k (rows past the product zero-filled); the stage has landed once
        // its bytes have and every staging thread has arrived.
        mbarrier_expect_bytes(landed + s % S::kStages, kStageBytesX);
        tensor_copy_2d(stage + S::kBytesW, &x_map, s * S::kStageK, rt.begin, landed + s % S::kStages);
      }
      stage_weight_rows<Staging, W, kVec>(w, features, p.k, s * S::kStageK, stage);
      cp_async_commit();
      if (s >= kLag) {
        cp_async_wait<kLag>();
        say_landed(s - kLag);
      }
    }
    cp_async_wait_all();
    for (int s = max(0, stages - kLag); s < stages; ++s) say_landed(s);
    return;
  }

  raise_register_budget<kMultiplyingRegisters>();
  static_assert(kSliceK == 2 * S::kStageK, "a slice is two stages");
  constexpr int kStageChunks = S::kStageK / kChunkK;
  const int thread = static_cast<int>(threadIdx.x) - Staging::kThreads;  // of the multiplying 256
  const int lane = thread % 32, warp = thread / 32;
  const int q = lane % 4;
  const int row_in_block = 16 * warp + lane / 4;  // the lane's feature (and + 8) within the block
  const int feature = feature0 + row_in_block;
  const SliceScales scales = slice_scales<W>(p, rt.group, feature);
  float acc[kTiles][4] = {};
  float sums[kTiles][4];
  start_running_sums(sums);

  const auto wait_landed = [&](int s) {
    mbarrier_wait(landed + s % S::kStages, round_parity(s));
    return buffer(s);
  };
  // Every multiplying thread arrives: an arrival releases its own thread's reads of the stage, no other's.
  const auto say_freed = [&](int s) { mbarrier_arrive(freed + s % S::kStages); };
  const auto load_fragments = [&](const char* stage, uint4* lo, uint4* hi) {
#pragma unroll
    for (int c = 0; c < kStageChunks; ++c) {
      lo[c] = weight_fragment<S, W>(stage, row_in_block, c, q);
      hi[c] = weight_fragment<S, W>(stage, row_in_block + 8, c, q);
    }
  };
  // The end of slice `slice`: its partial sums, scaled, join the running sums, in slice order.
  const auto end_slice = [&](int slice) {
    const SliceMultipliers m = slice_multipliers<W, kFault>(p, scales, slice);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      scale_slice<W>(m, acc[i]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        sums[i][j] = __fadd_rn(sums[i][j], acc[i][j]);
        acc[i][j] = 0.0f;
      }
    }
  };

  // Whole slices: the MMAs of both stages in flight together, and one wait (no branch around the MMAs, so that ptxas
  // keeps them running instead of waiting after each).
  const int whole_slices = chunks / kSliceChunks;
  for (int slice = 0; slice < whole_slices; ++slice) {
    uint4 lo[2][kStageChunks], hi[2][kStageChunks];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const char* stage = wait_landed(2 * slice + h);
      load_fragments(stage, lo[h], hi[h]);
      issue_steps<kStageChunks>(acc, lo[h], hi[h], stage + S::kBytesW);
    }
    wait_for_steps();
    say_freed(2 * slice);
    say_freed(2 * slice + 1);
    end_slice(slice);
  }
  // The rest, stage by stage: a short last slice (one to three chunks), or the planted control's, one chunk short.
  for (int s = 2 * whole_slices; s < stages; ++s) {
    const char* stage = wait_landed(s);
    const int stage_chunks = chunks - kStageChunks * s;
    uint4 lo[kStageChunks], hi[kStageChunks];
    if (stage_chunks >= 2) {
      load_fragments(stage, lo, hi);
      issue_steps<2>(acc, lo, hi, stage + S::kBytesW);
      wait_for_steps();
    } else if (stage_chunks == 1) {
      load_fragments(stage, lo, hi);
      issue_steps<1>(acc, lo, hi, stage + S::kBytesW);
      wait_for_steps();
    }
    say_freed(s);
    if (s % 2 == 1 || s == stages - 1) end_slice(s / 2);
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i) store_output_tile<kFault>(p, rt.begin + 8 * i, rt.end, feature, sums[i]);
#else
  __trap();  // linear_launch_refusal refuses this shape where the build has no sm_90a code
#endif
}

// The copy engine's view of a plain product's slot-ordered activations, [rows, x_k] BF16: a box of kStageK k by kRows
// rows, rows past the end read as zeros. The box keeps each row's swizzle as global memory has it, which is the one
// the stage needs because a plain product's tiles start at multiples of kRows (row_swizzle_keys's keys are zero).
// False where it does not apply, and the staging threads then copy the rows: rows gathered or grouped (their keys
// differ, and they are not one box), or a driver without the entry point.
bool activation_map(const LinearParams& p, CUtensorMap* map) {
  if (p.tiles != nullptr || p.x_index != nullptr || !aligned16(p.x)) return false;
  static const auto encode = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // not a failure of the launch: the rows are copied instead
      entry = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  if (encode == nullptr) return false;
  const auto x_k = static_cast<cuuint64_t>(linear_slot_order_k(p.k));
  const cuuint64_t dims[2] = {x_k, static_cast<cuuint64_t>(p.rows)};
  const cuuint64_t row_bytes[1] = {x_k * sizeof(uint16_t)};
  const cuuint32_t box[2] = {S::kStageK, S::kRows};
  const cuuint32_t element_steps[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p.x), dims, row_bytes, box, element_steps,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <class W, bool kVec, KernelFault kFault>
void launch_as(const LinearParams& p, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_allowed{0};
  const auto kernel = linear_wgmma_kernel<W, kVec, kFault>;
  allow_smem(reinterpret_cast<const void*>(kernel), S::kSmemBytes, smem_allowed);
  const int64_t blocks = static_cast<int64_t>((p.n + S::kFeatures - 1) / S::kFeatures) * p.max_tiles;
  CUtensorMap x_map{};
  const bool x_by_map = activation_map(p, &x_map);
  launch_kernel(kernel, static_cast<unsigned>(blocks), S::kThreads, S::kSmemBytes, stream, p, x_map, x_by_map);
}

template <KernelFault kFault>
void launch_faulted(const LinearParams& p, bool vec, cudaStream_t stream) {
  const auto go = [&](auto weights) {
    using W = decltype(weights);
    if (vec) {
      launch_as<W, true, kFault>(p, stream);
    } else {
      launch_as<W, false, kFault>(p, stream);
    }
  };
  if (p.w_type == LinearWeights::kFp8) {
    go(Fp8Weights{});
  } else {
    go(Bf16Weights{});
  }
}

}  // namespace

void launch_linear_wgmma(const LinearParams& p, bool vec, KernelFault fault, cudaStream_t stream) {
  // This kernel carries the faults of the tiled kernels' arithmetic (a chunk left out, a part's boundary skipped,
  // FP8 multipliers of the next slice); the others leave it at its production instantiation.
  dispatch_fault<KernelFault::kLinearDropsLastKTile, KernelFault::kLinearPartsSkipBoundary,
                 KernelFault::kLinearFp8ScaleNextSlice>(
      fault, [&](auto planted) { launch_faulted<decltype(planted)::value>(p, vec, stream); });
}

}  // namespace plumb::cuda::linear_detail
