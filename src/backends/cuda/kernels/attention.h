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

// One attention CTA's work: kAttentionTileRows consecutive rows, starting at first_row, of a sequence's rows
// r = t · (nq / nkv) + j (token t of the sequence, query head j of the KV head's group).
struct AttentionTile {
  int32_t sequence;
  int32_t first_row;
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
  const AttentionTile* tiles;          // [tile count]: one per CTA column (grid.x); grid.y is the KV head
  int64_t tile_count;
  int query_heads;   // nq
  int kv_heads;      // nkv, divides nq
  int head_dim;      // d, a multiple of 8 in [8, kAttentionMaxHeadDim]
  float scale_log2;  // d^-1/2 · log2(e): scores live in the exp2 domain
};

// Rotate-half rotary embedding; fault kRotaryWrongPairing rotates adjacent pairs instead.
void launch_rotary_embedding(const RotaryParams& params, KernelFault fault, cudaStream_t stream);
// The KV-cache scatter that precedes launch_attention.
void launch_kv_cache_write(const KvCacheWriteParams& params, KernelFault fault, cudaStream_t stream);
// Flash attention over the paged caches (already holding the new keys and values); faults kAttentionCausalOffByOne,
// kAttentionMissingBarrier and kAttentionPageTableIgnored select the planted variants.
void launch_attention(const AttentionParams& params, KernelFault fault, cudaStream_t stream);
// The dynamic shared memory (bytes) launch_attention gives attention_kernel for a head dim: the resource records
// list it, as ptxas sees only static shared memory.
size_t attention_smem_bytes(int head_dim);

}  // namespace plumb::cuda
