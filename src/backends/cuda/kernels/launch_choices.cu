// launch_choices.h: the launchers' choices, from the device's limits and its architecture's launch numbers.
#include <algorithm>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/device_limits.h"
#include "backends/cuda/kernels/gdn.h"
#include "backends/cuda/kernels/launch_choices.h"
#include "backends/cuda/kernels/launch_tuning.h"

namespace plumb::cuda {

const LaunchTuning& launch_tuning(int /*major*/, int /*minor*/) {
  // Only sm_90 is measured so far: every architecture runs its numbers (launch_tuning.h).
  return kSm90Tuning;
}

namespace {

const LaunchTuning& tuning_of(const DeviceLimits& device) {
  return launch_tuning(device.major, device.minor);
}

bool is_streaming(LinearShape shape) {
  return shape == LinearShape::kStream8 || shape == LinearShape::kStream16 || shape == LinearShape::kStream32 ||
         shape == LinearShape::kStream64;
}

// CTAs of attention_kernel for a head dim that the whole GPU holds at once.
int64_t resident_attention_ctas(int head_dim) {
  return int64_t{device_limits().multiprocessors} * attention_ctas_per_multiprocessor(head_dim);
}

}  // namespace

LinearShape choose_linear_shape(LinearWeights w_type, int64_t rows_per_matrix, int64_t total_rows, int64_t n,
                                bool wgmma, const DeviceLimits& device) {
  if (w_type == LinearWeights::kF32) return LinearShape::kF32;
  if (rows_per_matrix <= 8) return LinearShape::kStream8;
  if (rows_per_matrix <= 16) return LinearShape::kStream16;
  if (rows_per_matrix <= 32) return LinearShape::kStream32;
  // NVFP4 weights run on the streaming shapes alone (linear.h): prefill too, a tile of 64 rows at a time.
  if (rows_per_matrix <= 64 || w_type == LinearWeights::kNvfp4) return LinearShape::kStream64;
  const LaunchTuning& tuning = tuning_of(device);
  if (wgmma && tuning.prefill_on_wgmma) return LinearShape::kWgmma128;
  const int64_t features = linear_tile_features(LinearShape::kTiled128);
  const int64_t rows = linear_tile_rows(LinearShape::kTiled128);
  const int64_t wide_blocks = (n + features - 1) / features * ((total_rows + rows - 1) / rows);
  const int64_t enough = int64_t{tuning.wide_tile_blocks_per_sm} * device.multiprocessors;
  return wide_blocks >= enough ? LinearShape::kTiled128 : LinearShape::kTiled64;
}

int32_t choose_linear_k_split(const LinearParams& p, const DeviceLimits& device) {
  const int64_t slices = linear_slices(p.k);
  if (!is_streaming(p.shape) || slices <= 1) return 1;
  const LaunchTuning& tuning = tuning_of(device);
  // NVFP4 widens its codes as FP8 does, and wants as many warps.
  const bool fp8 = p.w_type == LinearWeights::kFp8 || p.w_type == LinearWeights::kNvfp4;
  const bool grouped = p.tiles != nullptr;
  const int64_t warps = static_cast<int64_t>((p.n + 15) / 16) * linear_row_tiles(p);
  const int64_t fp8_factor =
      !fp8 ? 1 : (p.shape == LinearShape::kStream8 && !grouped ? tuning.fp8_plain_8_row_factor : tuning.fp8_factor);
  const int64_t per_sm = (grouped ? tuning.grouped_stream_warps_per_sm : tuning.stream_warps_per_sm) * fp8_factor;
  const int64_t split = per_sm * device.multiprocessors / std::max<int64_t>(warps, 1);
  if (split <= 1) return 1;
  const int64_t matrices = grouped ? std::min<int64_t>(p.rows, p.max_tiles) : 1;
  const int64_t partial_bytes = slices * p.rows * p.n * int64_t{4};
  const int64_t weight_bytes = (p.w_type == LinearWeights::kNvfp4 ? 1
                                : fp8                             ? 2
                                                                  : 4) *
                               int64_t{p.n} * p.k * matrices / 2;
  const double allowed = p.w_type == LinearWeights::kNvfp4 ? tuning.nvfp4_partial_bytes_per_weight_byte
                         : fp8                             ? tuning.fp8_partial_bytes_per_weight_byte
                                                           : tuning.bf16_partial_bytes_per_weight_byte;
  if (static_cast<double>(partial_bytes) > allowed * static_cast<double>(weight_bytes)) return 1;
  return linear_k_split(p.k, split);
}

int choose_linear_stream_warps(int64_t warp_tiles, int max_warps, const DeviceLimits& device) {
  const int sms = device.multiprocessors;
  int warps = max_warps;
  while (warps > 1 && warp_tiles / warps < sms) warps /= 2;
  return warps;
}

bool linear_ring_holds_all_blocks(int64_t blocks, int ring_bytes, const DeviceLimits& device) {
  const int64_t per_sm = device.smem_per_multiprocessor / (ring_bytes + tuning_of(device).ring_block_extra_smem);
  return blocks <= per_sm * device.multiprocessors;
}

int choose_attention_split_items(int64_t split_tiles, int64_t kv_heads, int head_dim, int64_t key_blocks) {
  const int64_t ctas_per_item = std::max<int64_t>(1, split_tiles) * kv_heads;
  return static_cast<int>(
      std::clamp<int64_t>(resident_attention_ctas(head_dim) / ctas_per_item, 1, attention_segments(key_blocks)));
}

int64_t choose_attention_columns(int64_t kv_heads, int head_dim) {
  return std::max<int64_t>(1, resident_attention_ctas(head_dim) / kv_heads);
}

int choose_gdn_chunk_state_columns(int key_dim, const DeviceLimits& device) {
  return gdn_chunk_state_smem_bytes<32>(key_dim) <= static_cast<size_t>(device.smem_per_block_optin) ? 32 : 8;
}

int grid_stride_block_cap(const DeviceLimits& device) {
  return tuning_of(device).grid_stride_blocks_per_sm * device.multiprocessors;
}

unsigned choose_sample_cluster_blocks(int64_t rows, unsigned largest, const DeviceLimits& device) {
  unsigned blocks = largest;
  while (blocks > 1 && rows * blocks > device.multiprocessors) blocks /= 2;
  return blocks;
}

}  // namespace plumb::cuda
