// Matrix products y = x·wᵀ on the GPU, plain (linear) and grouped by expert (the MoE's expert GEMMs).
//
// BF16 weights go through tensor cores (mma.sync m16n8k16, weights as the A operand, product rows as the n
// dimension); activations are rounded to BF16 (nearest even) as operands and products accumulate in F32.
//
// The arithmetic, the same in every launch shape (docs/kernel-contract.md, "Fixed K-slices"): K is cut into fixed
// slices of kLinearSliceK = 128 (the last may be short). Each slice's partial sum starts from zero in an F32
// accumulator and takes its 32-wide k-chunks in ascending order, each two mma k-steps with a fixed k-to-fragment-slot
// permutation. An output is the slices' partial sums added in slice order with F32 additions rounded to nearest,
// y = ((p0 + p1) + p2) + ... A row's result therefore does not depend on how many rows share the call, which tile it
// lands in, which shape was launched, or whether the slices were spread over blocks (k_split): a split product
// stores every slice's partial sums and the last block of each tile to finish adds them up in slice order.
// On Hopper, prefill products run warpgroup MMA (wgmma, kWgmma128) with the same arithmetic: each of its k16 steps is
// given the 16 k of the matching mma.sync step, which on the H200 gives the same bits (linear_wgmma.cu says how and
// what was measured); its activations are staged in slot order (launch_linear_to_bf16_slots) for that.
// F32 weights (small test checkpoints) use CUDA cores with the CPU reference's order: within a slice eight partial
// sums by k mod 8, combined pairwise, and the slices added in order.
// FP8 weights (F8_E4M3 with a multiplier per output feature and K-slice, core/tensor.h's block scales) run the BF16
// arithmetic on their values, each exactly a BF16 number (E4M3's 3-bit mantissa and its exponents, 2^-9 to 2^8, fit
// BF16), widened in registers as they are loaded: a slice's partial sum is multiplied by its feature's multiplier for
// that slice (one F32 product, rounded to nearest) as the slice ends, and then joins the running sum or the split
// product's stored partial sums as a BF16 slice's would.
// NVFP4 weights (packed E2M1 pairs, an E4M3 scale per feature and 16 k, and one multiplier per feature, core/tensor.h)
// run the same arithmetic on e2m1 · e4m3, each exactly a BF16 number (at most 6 significant bits, exponents 2^-10 to
// 2^12), made in registers as the codes are loaded; every slice's partial sum takes the feature's multiplier, the same
// for all its slices, as FP8's take theirs. They run on the streaming shapes alone (any row count): the register ring,
// and up to 16 rows the shared-memory ring.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/kernels/fault.h"

namespace plumb::cuda {

// The width of a K-slice, the unit of the products' arithmetic (above).
constexpr int kLinearSliceK = 128;

// The most outputs one product writes (linear_parts: GDN's qkv, z, b and a).
constexpr int kLinearMaxParts = 4;

// The weights' element type.
enum class LinearWeights : int {
  kF32,    // F32, on CUDA cores (kF32 shape)
  kBF16,   // BF16, on tensor cores (every other shape)
  kFp8,    // F8_E4M3 with multipliers per feature and K-slice, on tensor cores (every BF16 shape)
  kNvfp4,  // packed E2M1 with E4M3 scales per feature and 16 k and a multiplier per feature, on tensor cores (the
           // streaming shapes' register ring)
};

// Launch shapes. The weight-streaming shapes serve decode: one warp per 16 output features and every product row
// of the tile, so weights are read once, straight from global memory into registers; the launcher picks 1 to 4 warps
// per block from the GPU's size. The tiled shapes serve prefill. Choosing among them changes speed only.
enum class LinearShape : int {
  kStream8,   // up to 8 rows per tile, F32 activations
  kStream16,  // up to 16 rows per tile, F32 activations
  kStream32,  // up to 32 rows per tile, BF16-staged activations
  kStream64,  // up to 64 rows per tile, BF16-staged activations
  kTiled64,   // 64 features x 128 rows per block, BF16-staged activations
  kTiled128,  // 128 features x 128 rows per block, BF16-staged activations
  kWgmma128,  // 128 features x 128 rows per block on Hopper's warpgroup MMA, BF16 activations in slot order
  kF32,       // F32 weights on CUDA cores, 8 rows per tile
};

// Whether the current device runs the kWgmma128 shape (a Hopper GPU, and a build for sm_90a).
bool linear_wgmma_runs();
// Product rows per row tile: the granularity of a grouped product's tile list.
int linear_tile_rows(LinearShape shape);
// Output features per block of a tiled or warpgroup shape (0 for the others, whose blocks take 16 per warp).
int linear_tile_features(LinearShape shape);
// Whether the shape reads its activations as BF16 rather than F32: made by launch_linear_to_bf16, or, where
// linear_stages_slot_order, by launch_linear_to_bf16_slots.
bool linear_stages_bf16(LinearShape shape);
// Whether the shape reads its BF16 activations in slot order (launch_linear_to_bf16_slots).
bool linear_stages_slot_order(LinearShape shape);

// The kernel a streaming shape runs. kStream8 and kStream16 have two, every other streaming shape one.
enum class LinearStreamKernel : int {
  kByOccupancy,   // production: the shared-memory ring when all its blocks fit on the GPU at once, else the registers
  kRegisterRing,  // linear_stream_kernel: weights through a ring of registers, 1 to 4 warps a block
  kSharedRing,    // linear_stream_ring_kernel: weights through shared memory; row tiles of up to 8 rows (kStream8)
                  // or 16 (kStream16): a plain product of that many, or a grouped product's tiles
};

struct LinearParams {
  LinearShape shape = LinearShape::kF32;
  // Production leaves these as they are; the op harness pins every variant in turn (linear_variants). A streaming
  // shape's kernel, and its warps per block (0: by the GPU's size; 1 to 4: forced, register ring only).
  LinearStreamKernel stream_kernel = LinearStreamKernel::kByOccupancy;
  int32_t stream_warps = 0;
  // K spread over this many blocks per tile, each a run of whole slices (streaming shapes only; 1: one block takes
  // all of K). choose_linear_k_split gives production's; launch_linear takes the count linear_k_split makes of it.
  // Above 1 it needs `partials` and `arrivals`.
  int32_t k_split = 1;
  float* partials = nullptr;    // [linear_slices(k), rows, n] F32 device: every slice's partial sums
  int32_t* arrivals = nullptr;  // [linear_arrival_count(params)] device, zeros; each tile's last block rezeroes its own
  const void* x = nullptr;      // [x_rows, k] activations: BF16 bits when linear_stages_bf16(shape), else F32
  const int32_t* x_index = nullptr;  // [rows] device, nullable: product row r reads activation row x_index[r], else r
  const void* w = nullptr;           // [groups, n, k] of w_type: one matrix per group (expert)
  LinearWeights w_type = LinearWeights::kBF16;
  int64_t w_group_stride = 0;  // elements from one group's matrix to the next
  // kFp8: [groups, n, linear_slices(k)] F32, feature f's multiplier for slice s of group g at
  // (g · n + f) · linear_slices(k) + s. kNvfp4: [groups, n] F32, feature f's multiplier for every slice.
  const float* w_scales = nullptr;
  // kNvfp4 only: [groups, n, k / 16] E4M3, the scale of k [16 j, 16 j + 16) of feature f of group g at
  // (g · n + f) · (k / 16) + j. w then holds the codes, [groups, n, k / 2] bytes (k a multiple of 16).
  const uint8_t* w_group_scales = nullptr;
  float* y = nullptr;  // [rows, n] F32, unless the output is in parts
  // A product of weights stacked by rows (linear_parts) writes each one's features to its own output: with part_count
  // above 0, features [part_end[j - 1], part_end[j]) (from 0 for j = 0) go to part_y[j] [rows, that many] F32, the
  // last part_end is n, and y is unused. Where an output goes changes no bit of it.
  int32_t part_count = 0;
  int32_t part_end[kLinearMaxParts] = {};
  float* part_y[kLinearMaxParts] = {};
  int32_t rows = 0;  // product rows
  int32_t n = 0;     // output features
  int32_t k = 0;     // reduction length
  // Grouped products only (nullptr for a plain one): tiles[i] = {group, row_begin, row_end} covers product rows
  // [row_begin, row_end), at most linear_tile_rows(shape) of them, with group `group`'s matrix; the first
  // *num_tiles entries are valid and the grid covers max_tiles of them.
  const int32_t* tiles = nullptr;      // [max_tiles, 3] device
  const int32_t* num_tiles = nullptr;  // [1] device
  int32_t max_tiles = 0;
  // The most rows any of those tiles holds (the grouping's tile_rows; 0: linear_tile_rows(shape)). The shared-memory
  // ring sizes its stages by it, so fewer rows a tile fit more blocks on a multiprocessor.
  int32_t tile_rows = 0;
};

// K-slices of a reduction of length k.
int linear_slices(int64_t k);
// The blocks a requested split really uses: every block a run of ceil(slices / requested) whole slices.
int32_t linear_k_split(int64_t k, int64_t requested);
// Row tiles of a product: its tile list's length for a grouped one.
int64_t linear_row_tiles(const LinearParams& params);
// The arrival counters a split launch of `params` may use (one per 16 features and row tile) and the partial sums it
// stores (F32 elements).
int64_t linear_arrival_count(const LinearParams& params);
int64_t linear_partials_count(const LinearParams& params);

// Why `params` cannot launch on the current device, or nullptr when it can: its shape does not suit its weights'
// dtype (or FP8 weights come without multipliers), or its forced stream_kernel / stream_warps / k_split do not suit its
// shape, its rows or the GPU's shared memory. A forced variant is refused, never replaced; launch_linear takes only
// params this accepts.
const char* linear_launch_refusal(const LinearParams& params);
void launch_linear(const LinearParams& params, KernelFault fault, cudaStream_t stream);
// The dynamic shared memory (bytes) launch_linear gives a shape's kernel (0 for kF32), and the shared-memory ring
// kernel that kStream8 and kStream16 hand a plain product of `rows` rows to where it fits (0 for other shapes). For
// the resource records.
int linear_smem_bytes(LinearShape shape);
int linear_ring_smem_bytes(LinearShape shape, int rows);

// One way of running a product: what LinearParams' shape, stream_kernel, stream_warps and k_split pin (k_split 0:
// production's choice; a count above the slices gives every slice its own block).
struct LinearVariant {
  LinearShape shape = LinearShape::kF32;
  LinearStreamKernel stream_kernel = LinearStreamKernel::kByOccupancy;
  int32_t stream_warps = 0;
  int32_t k_split = 0;
};
// LinearVariant::k_split for a block per slice.
constexpr int32_t kLinearSplitEverySlice = 1 << 20;
// How a product's rows are laid out: one matrix for them all, or grouped (each tile of rows its own matrix).
enum class LinearRows : int { kPlain, kGrouped };
// Every variant, each kernel and warp count pinned, that can run a product of `rows` rows laid out as `layout` with
// weights of `w_type` on the current device. They all give the same bits (the arithmetic above); the op harness
// checks that.
std::vector<LinearVariant> linear_variants(LinearWeights w_type, int64_t rows, LinearRows layout = LinearRows::kPlain);
const char* linear_weights_name(LinearWeights w_type);
const char* linear_shape_name(LinearShape shape);
const char* linear_stream_kernel_name(LinearStreamKernel kernel);

// y = BF16(x) rounded to nearest even, element by element: the staged activations of the BF16 shapes.
// x [count] F32; y [count] BF16 bits.
void launch_linear_to_bf16(const float* x, uint16_t* y, int64_t count, KernelFault fault, cudaStream_t stream);

// Slot order: the activations of the kWgmma128 shape, BF16 as above, each row's k laid out so that every 16 in a row
// are the 16 k one tensor-core step of the contract sums, in the slots mma_chunk gives them (kernels/linear.cu says
// why): within each 32-wide chunk, position 16 s + c holds k = 8 t + 2 (2 s + h) + e with t = (c mod 8) / 2,
// h = c / 8, e = c mod 2 (step s's k: 0-3, 8-11, 16-19, 24-27 for s = 0, the others for s = 1). A row is
// linear_slot_order_k(k) long (whole segments of 64, zero past k), and each segment's eight 16-byte units are stored
// swizzled: unit u of row r at unit u ^ (r mod 8), the order of the warpgroup MMA's 128-byte swizzle, so that a row
// segment lands in shared memory as it is, one 128-byte line a copy.
int64_t linear_slot_order_k(int64_t k);
// x [rows, k] F32; y [rows, linear_slot_order_k(k)] BF16 bits in slot order, swizzled.
void launch_linear_to_bf16_slots(const float* x, uint16_t* y, int64_t rows, int64_t k, KernelFault fault,
                                 cudaStream_t stream);

}  // namespace plumb::cuda
