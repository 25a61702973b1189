// Every choice a launcher makes about how to run a kernel rather than what it computes: a product's shape, K split
// and warps a block, whether the shared-memory ring takes it, the chunked delta rule's column slices, a grid's size.
// Written once, as functions of the device's limits (pass device_limits(): read once per device) and its
// architecture's launch numbers (launch_tuning.h), so a test can ask what they choose on a device it does not have.
// None changes a result (docs/kernel-contract.md).
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/device_limits.h"
#include "backends/cuda/kernels/linear.h"

namespace plumb::cuda {

// The shape for a product with `rows_per_matrix` rows per weight matrix (all rows for linear, a typical expert's
// share for MoE), `total_rows` rows in all and `n` output features, on warpgroup MMA where `wgmma` allows it (pass
// linear_wgmma_runs(); false to time the tiled kernel in its place).
LinearShape choose_linear_shape(LinearWeights w_type, int64_t rows_per_matrix, int64_t total_rows, int64_t n,
                                bool wgmma, const DeviceLimits& device);
// Production's split for `params` (shape, rows, n, k and, for a grouped product, max_tiles set): K is spread over
// blocks when the features alone give too few warps to keep the GPU's memory busy and the partial sums are small
// beside the weights. 1 for the tiled, warpgroup and F32 shapes.
int32_t choose_linear_k_split(const LinearParams& params, const DeviceLimits& device);
// Warps a block of the register-ring streaming kernel: the most (up to `max_warps`) that still give every
// multiprocessor a block, so small products spread over the whole GPU while large ones share each activation slab
// among more warps. `warp_tiles`: the product's 16-feature warps times its row tiles times its K split.
int choose_linear_stream_warps(int64_t warp_tiles, int max_warps, const DeviceLimits& device);
// Whether a product goes to the shared-memory ring kernel: when all its `blocks` (of `ring_bytes` of dynamic shared
// memory each) fit on the GPU at once. Larger products keep more warps busy with the register ring, whose blocks need
// less shared memory.
bool linear_ring_holds_all_blocks(int64_t blocks, int ring_bytes, const DeviceLimits& device);
// The two attention choices ask the driver how many attention CTAs fit a multiprocessor (once per kernel variant),
// on the current device.
// Items each split attention tile becomes (its key blocks in up to attention_segments(key_blocks) runs): as many as
// fill the GPU once with every split tile's CTAs (`split_tiles` tiles of `kv_heads` KV heads each, `head_dim` wide),
// at least one, at most the segments a token of `key_blocks` key blocks may have.
int choose_attention_split_items(int64_t split_tiles, int64_t kv_heads, int head_dim, int64_t key_blocks);
// CTA columns of a launch of split attention items (`kv_heads` KV heads, `head_dim` wide): as many as fill the GPU
// once, each taking every so-many-th item.
int64_t choose_attention_columns(int64_t kv_heads, int head_dim);
// Value columns a block of the chunked delta rule's state pass takes: 32 where that much shared memory fits a block
// (key dims up to 128 on sm_90), else 8. The width never changes a result (each output element's k-steps are the
// same).
int choose_gdn_chunk_state_columns(int key_dim, const DeviceLimits& device);
// The most blocks a grid-striding elementwise kernel (256-thread blocks) launches: enough to fill every
// multiprocessor.
int grid_stride_block_cap(const DeviceLimits& device);
// Blocks of the cluster that draws one token row (kernels/sample.cu): the most, from `largest` (16, or 8 where the
// device cannot co-schedule 16 of the sampler's blocks; its launcher asks the driver once) down by halves, that still
// keep all `rows` rows' clusters within one wave of the multiprocessors; at least 1.
unsigned choose_sample_cluster_blocks(int64_t rows, unsigned largest, const DeviceLimits& device);

}  // namespace plumb::cuda
