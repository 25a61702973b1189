// Gated DeltaNet kernels: the causal depthwise conv1d + SiLU that feeds q, k and v, and the gated delta rule with its
// gates (a fused token-by-token kernel for decode, a chunked WY-form kernel for prefill). The semantics are those of
// Backend::causal_conv1d_silu and Backend::gated_delta_rule (ops/backend.h). Plain C++ (compiled by g++ in the glue
// and by nvcc in the .cu files).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/fault.h"

namespace plumb::cuda {

// Conv widths (taps K) the conv kernel is instantiated for.
constexpr int kConvMinWidth = 2;
constexpr int kConvMaxWidth = 8;
// Tokens per conv CTA: a sequence's rows are cut into tiles of this many, each CTA re-reading the K-1 inputs before
// its tile. Every output is the same K-term sum whatever the tiling, so the tile size never changes a result.
constexpr int kConvTileRows = 64;
// Head dims (dk, dv) the delta-rule kernels support: any value in [1, kGdnMaxHeadDim].
constexpr int kGdnMaxHeadDim = 256;
// Chunk length of the chunked kernel; equal to kGdnChunkSize of ops/backend.h (the glue static_asserts it).
constexpr int kGdnChunkRows = 64;

// One conv CTA row's work: tokens [first, min(first + kConvTileRows, count)) of a sequence whose rows are
// [begin, begin + count). The tile with first == 0 also reads and rewrites the sequence's state.
struct ConvTile {
  float* state;   // [C, K-1]: the K-1 inputs before the sequence's first new token, oldest first
  int64_t begin;  // the sequence's first row of x and y
  int64_t count;  // the sequence's rows
  int64_t first;  // the tile's first token, relative to the sequence (a multiple of kConvTileRows)
  // [trail_count] device table: trail[t] [C, K-1] receives the state after the sequence's token t (Backend's
  // StateTrails), for the tile's tokens below trail_count.
  float* const* trail;
  int64_t trail_count;
};

struct CausalConv1dParams {
  const float* x;         // [T, C]
  const float* w;         // [C, K]
  float* y;               // [T, C], never aliasing x
  const ConvTile* tiles;  // [tile_count]: grid.x
  int64_t tile_count;
  int channels;  // C
  int width;     // K, in [kConvMinWidth, kConvMaxWidth]
};

// y = SiLU(causal depthwise conv), per sequence; fault kConvIgnoresState reads zeros in place of the state.
void launch_causal_conv1d_silu(const CausalConv1dParams& params, KernelFault fault, cudaStream_t stream);

// One sequence of a gated_delta_rule call: rows [begin, begin + count) of qkv, a, b and o; its state already holds
// `past` tokens.
struct GdnSequence {
  float* state;  // [nv, dk, dv] F32, read before the first token and rewritten after the last
  int64_t begin;
  int64_t count;  // > 0
  int64_t past;
  // [trail_count] device table: trail[t] [nv, dk, dv] receives the state after token t of these rows (Backend's
  // StateTrails); the recurrent kernel only.
  float* const* trail;
  int64_t trail_count;
};

struct GatedDeltaRuleParams {
  const float* qkv;      // [T, 2·nk·dk + nv·dv]: q heads | k heads | v heads
  const float* a;        // [T, nv]
  const float* b;        // [T, nv]
  const float* A_log;    // [nv]
  const float* dt_bias;  // [nv]
  float* o;              // [T, nv, dv]
  int key_heads;         // nk
  int value_heads;       // nv, a multiple of nk
  int key_dim;           // dk in [1, kGdnMaxHeadDim]
  int value_dim;         // dv in [1, kGdnMaxHeadDim]
  int64_t qkv_stride;    // 2·nk·dk + nv·dv
  float q_scale;         // dk^-1/2, computed on the host as the CPU reference does
  // Recurrent kernel only: every state is 16-byte aligned and dv % 4 == 0, so rows of S move as float4 (a
  // separate instantiation: the scalar path would cost the vector one registers).
  bool state_vec4;
};

// Token by token, one CTA per (32 value columns, value head, sequence): decode, and algorithm kRecurrent. sequences
// [count] is a device table (count at most 65535, the grid's z). Faults kGdnGateSign, kGdnMissingBarrier and
// kGdnTrailStale select planted variants.
void launch_gdn_recurrent(const GatedDeltaRuleParams& params, const GdnSequence* sequences, int count,
                          KernelFault fault, cudaStream_t stream);

// The chunked kernels' work list. Chunks are kGdnChunkRows long and start at multiples of kGdnChunkRows of their
// sequence's position (a sequence's first chunk may be shorter, as may its last).
struct GdnChunk {
  int64_t row;     // the chunk's first row of qkv, a, b and o
  int32_t length;  // tokens, in [1, kGdnChunkRows]
  int32_t unused;  // keeps the table 16-byte strided
};
// One sequence's consecutive chunks [first_chunk, first_chunk + chunk_count) of the table, in order.
struct GdnChunkRun {
  float* state;  // [nv, dk, dv] F32: the state before the run's first chunk, rewritten after its last
  int32_t first_chunk;
  int32_t chunk_count;
};
// Floats of one (chunk, value head) record of the scratch the chunk-parallel pass writes for the sequential one.
constexpr int64_t kGdnChunkRecordFloats = 9280;
struct GdnChunkedPlan {
  const GdnChunk* chunks;  // [chunk_count]
  int32_t chunk_count;
  const GdnChunkRun* runs;  // [run_count]: grid.z of the sequential pass
  int32_t run_count;
  float* records;  // [chunk_count, nv, kGdnChunkRecordFloats] scratch, 16-byte aligned
};

// Chunks of kGdnChunkRows in the WY form (multi-token sequences under algorithm kChunked), in two launches: every
// (chunk, key head) in parallel, then each run's chunks in order, parallel over value heads and value columns. Reads
// params' tensors and scalars; the plan lists the work. Faults kGdnGateSign,
// kGdnChunkBoundaryOffByOne and kGdnMissingBarrier select planted variants.
// The dynamic shared memory (bytes) launch_gdn_chunked gives its two kernels for a key head dim: the prepare pass,
// and the state pass in slices of kCols = 32 value columns (where the device allows that much) or 8. For the
// resource records.
size_t gdn_chunk_prepare_smem_bytes(int key_dim);
template <int kCols>
size_t gdn_chunk_state_smem_bytes(int key_dim);

void launch_gdn_chunked(const GatedDeltaRuleParams& params, const GdnChunkedPlan& plan, KernelFault fault,
                        cudaStream_t stream);

}  // namespace plumb::cuda
