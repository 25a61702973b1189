// Rotary embedding and causal grouped-query attention over paged BF16 KV caches: params structs and launchers.
// Plain C++ (compiled by g++ in the glue and by nvcc in attention.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/fault.h"

namespace plumb::cuda {

// Keys per online-softmax step, and positions per KV-cache page (kKvPageSize): block j of a sequence's keys is page
// j of its page table. Fixed: every query walks its keys in these blocks from position 0 upwards, so the block size
// is part of the arithmetic and must never depend on the call.
constexpr int kAttentionKeyBlock = 64;
// Query rows (pairs of token and query head) per attention CTA: 8 warps of one 16-row mma tile each.
constexpr int kAttentionTileRows = 128;
// Head dims the attention kernel supports: multiples of 8 up to 256.
constexpr int kAttentionMaxHeadDim = 256;

// Segments of a split tile's token (a token alone in its 64-position window of a call: gdn_pieces' rule, so which
// arithmetic a token gets depends on its position and the window cuts, never on the call): at position p it sees
// nb = p / kAttentionKeyBlock + 1 key blocks, split into attention_segments(nb) contiguous runs of whole blocks. Each
// segment runs its own online softmax from an empty state; the output is the segments' results folded in segment
// order (running max, rescaled sum and output) over the folded sum. The split is a function of the position alone,
// so however many CTAs share a token's segments its bits are the same; a decode row over a long context spreads over
// the GPU instead of walking its keys on one CTA per KV head. A token of one segment computes exactly as a whole tile
// does. Fixed like kAttentionKeyBlock: changing either constant changes the arithmetic.
constexpr int kAttentionSegmentMinBlocks = 4;  // a segment holds at least this many blocks (256 positions)
constexpr int kAttentionMaxSegments = 32;      // and a token has at most this many

// The segments of a row that sees `blocks` key blocks: one per kAttentionSegmentMinBlocks blocks, at most
// kAttentionMaxSegments. Never decreasing in `blocks`.
__host__ __device__ constexpr int attention_segments(int64_t blocks) {
  const int64_t segments = (blocks + kAttentionSegmentMinBlocks - 1) / kAttentionSegmentMinBlocks;
  return static_cast<int>(segments < kAttentionMaxSegments ? segments : kAttentionMaxSegments);
}
// The first block of segment `segment` of such a row (segment == segments: one past its last block).
__host__ __device__ constexpr int64_t attention_segment_begin(int segment, int64_t blocks, int segments) {
  return segment * blocks / segments;
}

struct RotaryParams {
  float* x;                  // [T, heads, d], rotated in place
  const int64_t* positions;  // [T]
  const float* inv_freq;     // [rotary_dim / 2]: 1 / theta^(2i / rotary_dim), computed on the host as the CPU does
  int64_t tokens;            // T
  int heads;
  int head_dim;    // d
  int rotary_dim;  // even, <= d
};

// One sequence of an attention call. Its rows of q, k, v, o are [begin, begin + count); its cache already holds
// `past` positions. Position p lives in pool page pages[first_page + p / kAttentionKeyBlock] (pages: the call's
// concatenated page tables), at slot p % kAttentionKeyBlock; its table covers past + count positions.
struct AttentionSequence {
  uint16_t* k_pool;    // [pool pages, kAttentionKeyBlock, nkv, d] BF16 bits
  uint16_t* v_pool;    // [pool pages, kAttentionKeyBlock, nkv, d] BF16 bits
  int64_t first_page;  // where its page table starts in the call's page tables
  int64_t begin;
  int64_t count;
  int64_t past;
};

// One attention work item, for every KV head (grid.y): rows [first_row, first_row + rows) of a sequence's rows
// r = t · (nq / nkv) + j (token t of the sequence, query head j of the KV head's group), at most kAttentionTileRows.
// A whole tile (chunk -1) walks every key of its rows in one CTA. A split tile, one token's rows, is split_chunks
// items (chunk 0, 1, ...), each a run of the token's segments writing their results to the partials; the last of
// them to arrive folds every segment in order into o.
struct AttentionTile {
  int32_t sequence;
  int32_t first_row;
  int32_t rows;
  int32_t chunk;  // -1: a whole tile; else which run of the token's segments this item computes
  int32_t split;  // a split tile's ordinal: its arrival counter is arrivals[split · nkv + KV head]
  int32_t unused;
  int64_t partial_first;  // a split tile's first partial row
};

// Writes each sequence's new keys and values, rounded to BF16, into its pages at positions [past, past + count).
struct KvCacheWriteParams {
  const float* k;                      // [T, nkv, d]
  const float* v;                      // [T, nkv, d]
  const AttentionSequence* sequences;  // [sequence count]
  const int32_t* pages;                // [Σ table lengths]: every sequence's page table, sequence after sequence
  const int32_t* row_sequence;         // [T]: the sequence that owns each row, -1 for none
  int64_t tokens;                      // T
  int kv_heads;                        // nkv
  int head_dim;                        // d, a multiple of 8
};

struct AttentionParams {
  const float* q;                      // [T, nq, d]
  float* o;                            // [T, nq, d]
  const AttentionSequence* sequences;  // [sequence count]
  const int32_t* pages;                // [Σ table lengths]: every sequence's page table, sequence after sequence
  const AttentionTile* tiles;          // [tile count]: CTA column x runs items x, x + grid.x, ...; grid.y: KV head
  int64_t tile_count;
  // Split tiles only: partial row partial_first + (KV head · kAttentionMaxSegments + segment) · rows + r holds row r
  // of the tile's segment results. A token of S segments has min(split_chunks, S) items; item c takes segments
  // [c·S / items, (c + 1)·S / items).
  float* partial_o;      // [partial rows, d]: each segment's unnormalized output
  float* partial_stats;  // [partial rows, 2]: its running max (exp2 domain) and sum
  int32_t* arrivals;     // [split tiles · nkv]: zeros between launches; each split tile's last item rezeroes its own
  int split_chunks;      // items a split tile has (>= 1)
  int query_heads;       // nq
  int kv_heads;          // nkv, divides nq
  int head_dim;          // d, a multiple of 8 in [8, kAttentionMaxHeadDim]
  float scale_log2;      // d^-1/2 · log2(e): scores live in the exp2 domain
};

// Rotate-half rotary embedding; fault kRotaryWrongPairing rotates adjacent pairs instead.
void launch_rotary_embedding(const RotaryParams& params, KernelFault fault, cudaStream_t stream);
// The KV-cache scatter that precedes launch_attention.
void launch_kv_cache_write(const KvCacheWriteParams& params, KernelFault fault, cudaStream_t stream);
// Flash attention over the paged caches (already holding the new keys and values), grid (columns, nkv): with ctas 0
// the items are whole tiles, one CTA each; else split items, spread over min(ctas, items) columns. Faults
// kAttentionCausalOffByOne, kAttentionMissingBarrier, kAttentionPageTableIgnored and kAttentionSegmentsDropLast
// select the planted variants.
void launch_attention(const AttentionParams& params, int64_t ctas, KernelFault fault, cudaStream_t stream);
// How many attention CTAs of this head dim fit on one multiprocessor at once (read once per kernel variant).
int attention_ctas_per_multiprocessor(int head_dim);
// The dynamic shared memory (bytes) launch_attention gives attention_kernel for a head dim: the resource records
// list it, as ptxas sees only static shared memory.
size_t attention_smem_bytes(int head_dim);

}  // namespace plumb::cuda
