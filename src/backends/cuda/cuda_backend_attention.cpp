// CudaBackend::rotary_embedding and CudaBackend::attention: shape checks, the per-call tables (positions and
// frequencies; sequences, tiles, row owners and page tables) uploaded in one copy each, and the launches of
// kernels/attention.cu.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/launch_choices.h"
#include "backends/cuda/tensor_checks.h"
#include "core/error.h"
#include "ops/checks.h"

namespace plumb {
namespace {

static_assert(cuda::kAttentionKeyBlock == kKvPageSize, "a KV page must be one attention key block");

// The attention kernels move 16-byte vectors.
void expect_aligned(const Tensor& t, const char* op, const char* arg) {
  PLUMB_CHECK(reinterpret_cast<uintptr_t>(t.data()) % 16 == 0, "{}: {} is not 16-byte aligned", op, arg);
}

size_t round_up_16(size_t bytes) {
  return (bytes + 15) / 16 * 16;
}

}  // namespace

void CudaBackend::rotary_embedding(Tensor& x, const std::vector<int64_t>& positions, int64_t rotary_dim, double theta) {
  expect_gpu(x, DType::kF32, 3, "rotary_embedding", "x");
  const int64_t T = x.dim(0), heads = x.dim(1), d = x.dim(2), half = rotary_dim / 2;
  PLUMB_CHECK(static_cast<int64_t>(positions.size()) == T, "rotary_embedding: {} positions for {} tokens",
              positions.size(), T);
  PLUMB_CHECK(rotary_dim >= 0 && rotary_dim % 2 == 0 && rotary_dim <= d,
              "rotary_embedding: rotary dim {} for head dim {}", rotary_dim, d);
  PLUMB_CHECK(T <= kInt32Max && heads * d <= kInt32Max, "rotary_embedding: x {} too large", shape_str(x.shape()));
  if (T == 0 || half == 0) return;

  // Frequencies exactly as the CPU reference computes them (FP32 powf on the host), so only cos/sin may differ.
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] =
        1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
  // One upload: positions [T] I64, then inv_freq [half] F32.
  const size_t positions_bytes = round_up_16(positions.size() * sizeof(int64_t));
  std::vector<std::byte> table(positions_bytes + inv_freq.size() * sizeof(float));
  std::memcpy(table.data(), positions.data(), positions.size() * sizeof(int64_t));
  std::memcpy(table.data() + positions_bytes, inv_freq.data(), inv_freq.size() * sizeof(float));
  const std::shared_ptr<void> device_table = upload_vector(table);
  const auto* base = static_cast<const std::byte*>(device_table.get());

  cuda::RotaryParams params{};
  params.x = x.f32();
  params.positions = reinterpret_cast<const int64_t*>(base);
  params.inv_freq = reinterpret_cast<const float*>(base + positions_bytes);
  params.tokens = T;
  params.heads = static_cast<int>(heads);
  params.head_dim = static_cast<int>(d);
  params.rotary_dim = static_cast<int>(rotary_dim);
  enqueue("rotary_embedding_kernel", [&] { cuda::launch_rotary_embedding(params, fault(), stream()); });
}

const int32_t* CudaBackend::upload_page_tables(const std::vector<int32_t>& page_tables) {
  // The last upload serves again while it holds the same ids: in eager calls its device copy is never rewritten, and
  // within one recorded or replayed step every attention layer asks for the same tables, in both alike.
  PageTablesUpload& last = last_page_tables_;
  if (!last.device || last.step != step_serial() || last.ids != page_tables) {
    last.device = upload_vector(page_tables);
    last.ids = page_tables;
    last.step = step_serial();
  }
  return static_cast<const int32_t*>(last.device.get());
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<KvCache*>& caches,
                            const BatchRows& batch, Tensor& o, GdnAlgorithm rule) {
  expect_gpu(q, DType::kF32, 3, "attention", "q");
  expect_gpu(k, DType::kF32, 3, "attention", "k");
  expect_gpu(v, DType::kF32, 3, "attention", "v");
  expect_gpu(o, DType::kF32, 3, "attention", "o");
  expect_aligned(q, "attention", "q");
  expect_aligned(k, "attention", "k");
  expect_aligned(v, "attention", "v");
  expect_aligned(o, "attention", "o");
  const int64_t T = q.dim(0), nq = q.dim(1), d = q.dim(2), nkv = k.dim(1);
  expect_shape(k, {T, nkv, d}, "attention", "k");
  expect_shape(v, {T, nkv, d}, "attention", "v");
  expect_shape(o, {T, nq, d}, "attention", "o");
  PLUMB_CHECK(nkv > 0 && nq % nkv == 0, "attention: {} query heads are not a multiple of {} KV heads", nq, nkv);
  PLUMB_CHECK(d % 8 == 0 && d >= 8 && d <= cuda::kAttentionMaxHeadDim,
              "attention: head dim {} is not a multiple of 8 in [8, {}]", d, cuda::kAttentionMaxHeadDim);
  PLUMB_CHECK(T <= kInt32Max && nq <= kInt32Max, "attention: q {} too large", shape_str(q.shape()));
  expect_batch(batch, T, caches.size(), "attention");
  const int64_t group = nq / nkv;
  const int64_t page_stride = step_kv_pages();

  // Per sequence: its pools, rows and page table (the pages its positions need, appended to page_tables); per row:
  // its owner; its rows in work items by the chunk rule (gdn_pieces): the tokens of windows the call carries two or
  // more of in whole tiles of kAttentionTileRows rows, one CTA each; a token alone in its window (a decode step) in a
  // split tile of its own, whose segments spread over several CTAs (kernels/attention.h).
  std::vector<cuda::AttentionSequence> sequences(batch.size());
  std::vector<int32_t> page_tables;
  std::vector<int32_t> row_sequence(T, -1);
  std::vector<cuda::AttentionTile> tiles;   // whole tiles
  std::vector<int64_t> tile_last_position;  // the ordering key: heaviest tiles first shortens the tail
  std::vector<cuda::AttentionTile> split_tiles;
  int64_t split_blocks = 1;  // the most key blocks a split tile's token may see
  int64_t partial_rows = 0;  // rows of the split tiles' partials
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceRows& rows = batch[i];
    PLUMB_CHECK(caches[i] != nullptr, "attention: sequence {} has no cache", i);
    const KvCache& cache = *caches[i];
    expect_gpu(cache.k, DType::kBF16, 4, "attention", "k pool");
    expect_gpu(cache.v, DType::kBF16, 4, "attention", "v pool");
    expect_aligned(cache.k, "attention", "k pool");
    expect_aligned(cache.v, "attention", "v pool");
    check_kv_cache(cache, nkv, d, rows.past + rows.count, i, "attention");
    PLUMB_CHECK(rows.count * group <= kInt32Max, "attention: sequence {} has too many rows ({})", i, rows.count);
    // A recorded step lays the page tables out at its stride, so their size does not depend on the lengths.
    const auto first_page = static_cast<int64_t>(page_tables.size());
    const int64_t pages = (rows.past + rows.count + kKvPageSize - 1) / kKvPageSize;
    PLUMB_CHECK(page_stride == 0 || pages <= page_stride,
                "attention: sequence {} needs {} KV pages, past the recorded step's {} a sequence", i, pages,
                page_stride);
    page_tables.insert(page_tables.end(), cache.pages.begin(), cache.pages.begin() + pages);
    if (page_stride > 0) page_tables.resize(static_cast<size_t>(first_page + page_stride), 0);
    sequences[i] = {
        cache.k.data_as<uint16_t>(), cache.v.data_as<uint16_t>(), first_page, rows.begin, rows.count, rows.past};
    for (int64_t r = rows.begin; r < rows.begin + rows.count; ++r) row_sequence[r] = static_cast<int32_t>(i);
    const auto sequence = static_cast<int32_t>(i);
    const GdnPieces pieces = gdn_pieces(rows.past, rows.count, rule);
    for (int k = 0; k < pieces.size; ++k) {
      const GdnPiece& piece = pieces.piece[k];
      const int64_t end_row = (piece.offset + piece.count) * group;
      if (piece.chunked) {
        for (int64_t first = piece.offset * group; first < end_row; first += cuda::kAttentionTileRows) {
          const int64_t count = std::min<int64_t>(cuda::kAttentionTileRows, end_row - first);
          tiles.push_back({sequence, static_cast<int32_t>(first), static_cast<int32_t>(count), -1, 0, 0, 0});
          tile_last_position.push_back(rows.past + (first + count - 1) / group);
        }
        continue;
      }
      for (int64_t t = piece.offset; t < piece.offset + piece.count; ++t) {
        // A recorded step's items may not depend on the lengths: its stride bounds every token's blocks.
        split_blocks = std::max(split_blocks, page_stride > 0 ? page_stride : (rows.past + t) / kKvPageSize + 1);
        for (int64_t first = t * group; first < (t + 1) * group; first += cuda::kAttentionTileRows) {
          const int64_t count = std::min<int64_t>(cuda::kAttentionTileRows, (t + 1) * group - first);
          split_tiles.push_back({sequence, static_cast<int32_t>(first), static_cast<int32_t>(count), 0,
                                 static_cast<int32_t>(split_tiles.size()), 0, partial_rows});
          partial_rows += count * nkv * cuda::kAttentionMaxSegments;
        }
      }
    }
  }
  expect_unshared_written_pages(caches, batch, "attention");
  if (cuda::attention_segments(split_blocks) == 1) {
    // Every lone token has one segment, the arithmetic of a whole tile: they run as whole tiles, one CTA each.
    for (cuda::AttentionTile tile : split_tiles) {
      tile.chunk = -1;
      tiles.push_back(tile);
      tile_last_position.push_back(batch[static_cast<size_t>(tile.sequence)].past + tile.first_row / group);
    }
    split_tiles.clear();
  }
  if (tiles.empty() && split_tiles.empty()) return;
  // A function of the tile count and the blocks bound alone, so a recorded step's never changes.
  const int split_chunks = cuda::choose_attention_split_items(static_cast<int64_t>(split_tiles.size()), nkv,
                                                              static_cast<int>(d), split_blocks);
  // Scheduling order only: a tile's results do not depend on when it runs. Whole tiles heaviest first; split items
  // run by run, so each CTA column's share of empty items (tokens of fewer segments) is small.
  std::vector<size_t> order(tiles.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return tile_last_position[a] > tile_last_position[b]; });
  std::vector<cuda::AttentionTile> items;  // whole tiles, then split items
  for (size_t i : order) items.push_back(tiles[i]);
  for (int chunk = 0; chunk < split_chunks; ++chunk)
    for (cuda::AttentionTile tile : split_tiles) {
      tile.chunk = chunk;
      items.push_back(tile);
    }
  PLUMB_CHECK(static_cast<int64_t>(items.size()) <= kInt32Max, "attention: {} work items", items.size());
  PLUMB_CHECK(static_cast<int64_t>(split_tiles.size()) * nkv <= kLinearArrivals,
              "attention: {} split tiles of {} KV heads exceed the {} arrival counters", split_tiles.size(), nkv,
              kLinearArrivals);

  // Two uploads: sequences, items and row owners (each section 16-byte aligned), which hold the layer's pools; and
  // the page tables, the same in every attention layer of a forward pass, which go once.
  const size_t sequences_bytes = round_up_16(sequences.size() * sizeof(cuda::AttentionSequence));
  const size_t items_bytes = round_up_16(items.size() * sizeof(cuda::AttentionTile));
  const size_t rows_offset = sequences_bytes + items_bytes;
  std::vector<std::byte> table(rows_offset + row_sequence.size() * sizeof(int32_t));
  std::memcpy(table.data(), sequences.data(), sequences.size() * sizeof(cuda::AttentionSequence));
  std::memcpy(table.data() + sequences_bytes, items.data(), items.size() * sizeof(cuda::AttentionTile));
  std::memcpy(table.data() + rows_offset, row_sequence.data(), row_sequence.size() * sizeof(int32_t));
  const std::shared_ptr<void> device_table = upload_vector(table);
  const auto* base = static_cast<const std::byte*>(device_table.get());
  const auto* device_sequences = reinterpret_cast<const cuda::AttentionSequence*>(base);
  const auto* device_items = reinterpret_cast<const cuda::AttentionTile*>(base + sequences_bytes);
  const auto* device_pages = upload_page_tables(page_tables);

  // The new keys and values go into their pages first; attention then reads every key through the page tables.
  cuda::KvCacheWriteParams write{};
  write.k = k.f32();
  write.v = v.f32();
  write.sequences = device_sequences;
  write.pages = device_pages;
  write.row_sequence = reinterpret_cast<const int32_t*>(base + rows_offset);
  write.tokens = T;
  write.kv_heads = static_cast<int>(nkv);
  write.head_dim = static_cast<int>(d);
  enqueue("kv_cache_write_kernel", [&] { cuda::launch_kv_cache_write(write, fault_, stream()); });

  cuda::AttentionParams params{};
  params.q = q.f32();
  params.o = o.f32();
  params.sequences = device_sequences;
  params.pages = device_pages;
  params.query_heads = static_cast<int>(nq);
  params.kv_heads = static_cast<int>(nkv);
  params.head_dim = static_cast<int>(d);
  params.scale_log2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)) * 1.4426950408889634);
  if (!tiles.empty()) {
    params.tiles = device_items;
    params.tile_count = static_cast<int64_t>(tiles.size());
    enqueue("attention_kernel", [&] { cuda::launch_attention(params, 0, fault(), stream()); });
  }
  if (split_tiles.empty()) return;
  const std::shared_ptr<void> partials =  // [partial rows, d] outputs, then [partial rows, 2] maxes and sums
      scratch(static_cast<size_t>(partial_rows * (d + 2)) * sizeof(float));
  params.partial_o = static_cast<float*>(partials.get());
  params.partial_stats = params.partial_o + partial_rows * d;
  params.arrivals = linear_arrivals_;
  params.split_chunks = split_chunks;
  params.tiles = device_items + tiles.size();
  params.tile_count = static_cast<int64_t>(split_tiles.size()) * split_chunks;
  const int64_t columns = cuda::choose_attention_columns(nkv, static_cast<int>(d));
  enqueue("attention_kernel", [&] { cuda::launch_attention(params, columns, fault(), stream()); });
}

}  // namespace plumb
