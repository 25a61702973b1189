// CudaBackend's matrix products: linear and the routed experts of an MoE layer (kernels/linear.h, experts.h).
#include <algorithm>
#include <cstdint>
#include <memory>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/experts.h"
#include "backends/cuda/kernels/launch_choices.h"
#include "backends/cuda/kernels/linear.h"
#include "backends/cuda/tensor_checks.h"
#include "core/error.h"
#include "ops/checks.h"

namespace plumb {
namespace {

// The kernels' weight type of w: BF16, F32, F8_E4M3 with its block scales, or E2M1 (NVFP4) with its block and group
// scales (core/tensor.h).
cuda::LinearWeights weight_type(const Tensor& w, const char* op, const char* name) {
  switch (w.dtype()) {
    case DType::kBF16:
      return cuda::LinearWeights::kBF16;
    case DType::kF32:
      return cuda::LinearWeights::kF32;
    case DType::kF8E4M3:
      PLUMB_CHECK(w.block_scales() != nullptr, "{}: the F8_E4M3 weight {} {} has no block scales", op, name,
                  shape_str(w.shape()));
      return cuda::LinearWeights::kFp8;
    case DType::kE2M1:
      PLUMB_CHECK(w.block_scales() != nullptr && w.group_scales() != nullptr,
                  "{}: the E2M1 (NVFP4) weight {} {} has no block or group scales", op, name, shape_str(w.shape()));
      return cuda::LinearWeights::kNvfp4;
    default:
      PLUMB_FAIL("{}: {} must be BF16, F32, F8_E4M3 or E2M1 with their scales, not {}", op, name,
                 dtype_name(w.dtype()));
  }
}

// A quantized weight's multipliers and (NVFP4) group scales (nullptr for other weights).
const float* weight_scales(const Tensor& w) {
  return w.block_scales() != nullptr ? w.block_scales()->data_as<const float>() : nullptr;
}
const uint8_t* weight_group_scales(const Tensor& w) {
  return w.group_scales() != nullptr ? w.group_scales()->data_as<const uint8_t>() : nullptr;
}

// x [rows, k] F32 and w [n, k] BF16, F32 or FP8 on the GPU, within the kernels' 32-bit indices.
void expect_product(const Tensor& x, const Tensor& w, const char* op) {
  expect_gpu(x, op, "x");
  expect_gpu(w, op, "w");
  expect_dtype(x, DType::kF32, op, "x");
  weight_type(w, op, "w");
  PLUMB_CHECK(x.rank() == 2 && w.rank() == 2, "{}: x {} and w {} must be matrices", op, shape_str(x.shape()),
              shape_str(w.shape()));
  PLUMB_CHECK(w.dim(1) == x.dim(1), "{}: weight {} does not match input {}", op, shape_str(w.shape()),
              shape_str(x.shape()));
  expect_int32(x.dim(0), op, "rows");
  expect_int32(w.dim(0), op, "output features");
  expect_int32(x.dim(1), op, "input features");
}

// y [rows, n] F32 on the GPU, not x itself.
void expect_product_output(const Tensor& x, const Tensor& w, const Tensor& y, const char* op, const char* name) {
  expect_gpu(y, op, name);
  expect_dtype(y, DType::kF32, op, name);
  expect_shape(y, {x.dim(0), w.dim(0)}, op, name);
  PLUMB_CHECK(y.data() != x.data() || x.dim(0) == 0 || w.dim(0) == 0, "{}: {} must not alias x", op, name);
}

void refuse_variant(const cuda::LinearVariant& variant, const cuda::LinearParams& params, const char* op) {
  const char* refusal = cuda::linear_launch_refusal(params);
  PLUMB_CHECK(refusal == nullptr,
              "{}: the forced variant {} ({}, {} warps, K split {}) cannot run {} rows of [{}, {}] {} "
              "weights here: {}",
              op, cuda::linear_shape_name(variant.shape), cuda::linear_stream_kernel_name(variant.stream_kernel),
              variant.stream_warps, variant.k_split, params.rows, params.n, params.k,
              cuda::linear_weights_name(params.w_type), refusal);
}

}  // namespace

std::shared_ptr<void> CudaBackend::plan_linear(cuda::LinearParams& params, const char* op) {
  if (linear_variant_) {
    params.shape = linear_variant_->shape;
    params.stream_kernel = linear_variant_->stream_kernel;
    params.stream_warps = linear_variant_->stream_warps;
  }
  params.k_split = linear_variant_ && linear_variant_->k_split != 0
                       ? linear_variant_->k_split
                       : cuda::choose_linear_k_split(params, cuda::device_limits());
  std::shared_ptr<void> partials;  // [slices, rows, n] F32, when K is spread over blocks
  if (cuda::linear_k_split(params.k, params.k_split) > 1) {
    if (cuda::linear_arrival_count(params) > kLinearArrivals) {
      // Too many tiles for the counters: only a forced split can get here (production splits small products).
      PLUMB_CHECK(!linear_variant_, "{}: a split over {} tiles exceeds the {} arrival counters", op,
                  cuda::linear_arrival_count(params), kLinearArrivals);
      params.k_split = 1;
    } else {
      partials = scratch(static_cast<size_t>(cuda::linear_partials_count(params)) * sizeof(float));
      params.partials = static_cast<float*>(partials.get());
      params.arrivals = linear_arrivals_;
    }
  }
  if (linear_variant_) refuse_variant(*linear_variant_, params, op);
  return partials;
}

void CudaBackend::linear(const Tensor& x, const Tensor& w, Tensor& y) {
  expect_product(x, w, "linear");
  expect_product_output(x, w, y, "linear", "y");
  if (x.dim(0) == 0 || w.dim(0) == 0) return;
  cuda::LinearParams params;
  params.y = y.f32();
  launch_product(x, w, w.dim(0), params, "linear");
}

void CudaBackend::linear_parts(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) {
  const char* op = "linear_parts";
  PLUMB_CHECK(ws.size() == ys.size(), "{}: {} weights for {} outputs", op, ws.size(), ys.size());
  for (size_t j = 0; j < ws.size(); ++j) {
    PLUMB_CHECK(ws[j] && ys[j], "{}: part {} has no weight or no output", op, j);
    expect_product(x, *ws[j], op);
    expect_product_output(x, *ws[j], *ys[j], op, "an output");
  }
  // Runs of weights each of which starts where the one before it ends (and a quantized weight's scales likewise): one
  // product over each run's rows.
  const auto follows = [](const Tensor& before, const Tensor& w) {
    return static_cast<const char*>(before.data()) + before.nbytes() == w.data();
  };
  const auto continues = [&](const Tensor& before, const Tensor& w) {
    if (w.dtype() != before.dtype() || !follows(before, w)) return false;
    const auto scales_follow = [&](const Tensor* a, const Tensor* b) {
      return a == nullptr || (b != nullptr && follows(*a, *b));
    };
    return scales_follow(before.block_scales(), w.block_scales()) &&
           scales_follow(before.group_scales(), w.group_scales());
  };
  for (size_t first = 0; first < ws.size();) {
    size_t end = first + 1;
    while (end < ws.size() && end - first < cuda::kLinearMaxParts && continues(*ws[end - 1], *ws[end])) ++end;
    if (end == first + 1 || x.dim(0) == 0) {
      linear(x, *ws[first], *ys[first]);
      ++first;
      continue;
    }
    cuda::LinearParams params;
    int64_t n = 0;
    for (size_t j = first; j < end; ++j) {
      n += ws[j]->dim(0);
      params.part_end[params.part_count] = static_cast<int32_t>(n);
      params.part_y[params.part_count++] = ys[j]->f32();
    }
    expect_int32(n, op, "output features of a run of parts");
    launch_product(x, *ws[first], n, params, op);
    first = end;
  }
}

void CudaBackend::launch_product(const Tensor& x, const Tensor& w, int64_t n, cuda::LinearParams& params,
                                 const char* op) {
  const int64_t rows = x.dim(0), k = x.dim(1);
  params.w_type = weight_type(w, op, "w");
  params.shape =
      cuda::choose_linear_shape(params.w_type, rows, rows, n, cuda::linear_wgmma_runs(), cuda::device_limits());
  params.x = x.data();
  params.w = w.data();
  params.w_scales = weight_scales(w);
  params.w_group_scales = weight_group_scales(w);
  params.rows = static_cast<int32_t>(rows);
  params.n = static_cast<int32_t>(n);
  params.k = static_cast<int32_t>(k);
  const std::shared_ptr<void> partials = plan_linear(params, op);
  const std::shared_ptr<void> x_bf16 = stage_bf16(x.f32(), rows, k, params.shape);
  if (x_bf16) params.x = x_bf16.get();
  enqueue(op, [&] { cuda::launch_linear(params, fault_, stream_); });
}

std::shared_ptr<void> CudaBackend::stage_bf16(const float* x, int64_t rows, int64_t k, cuda::LinearShape shape) {
  if (!cuda::linear_stages_bf16(shape) || rows == 0 || k == 0) return nullptr;
  if (cuda::linear_stages_slot_order(shape)) {
    auto staged = scratch(static_cast<size_t>(rows * cuda::linear_slot_order_k(k)) * sizeof(uint16_t));
    enqueue("linear_to_bf16_slots", [&] {
      cuda::launch_linear_to_bf16_slots(x, static_cast<uint16_t*>(staged.get()), rows, k, fault_, stream_);
    });
    return staged;
  }
  auto staged = scratch(static_cast<size_t>(rows * k) * sizeof(uint16_t));
  enqueue("linear_to_bf16",
          [&] { cuda::launch_linear_to_bf16(x, static_cast<uint16_t*>(staged.get()), rows * k, fault_, stream_); });
  return staged;
}

void CudaBackend::moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                              const ExpertWeights& experts, Tensor& y) {
  const char* op = "moe_experts";
  expect_gpu(x, op, "x");
  expect_gpu(expert_ids, op, "expert_ids");
  expect_gpu(expert_weights, op, "expert_weights");
  expect_gpu(experts.gate_up, op, "gate_up");
  expect_gpu(experts.down, op, "down");
  expect_gpu(y, op, "y");
  expect_dtype(x, DType::kF32, op, "x");
  expect_dtype(expert_ids, DType::kI32, op, "expert_ids");
  expect_dtype(expert_weights, DType::kF32, op, "expert_weights");
  expect_dtype(y, DType::kF32, op, "y");
  const cuda::LinearWeights w_type = weight_type(experts.gate_up, op, "gate_up");
  PLUMB_CHECK(weight_type(experts.down, op, "down") == w_type, "{}: down is {} but gate_up is {}", op,
              dtype_name(experts.down.dtype()), dtype_name(experts.gate_up.dtype()));
  PLUMB_CHECK(x.rank() == 2 && expert_ids.rank() == 2, "{}: x {} and expert_ids {} must be matrices", op,
              shape_str(x.shape()), shape_str(expert_ids.shape()));
  PLUMB_CHECK(experts.gate_up.rank() == 3 && experts.down.rank() == 3,
              "{}: gate_up {} and down {} must be [E, 2I, H] and [E, H, I]", op, shape_str(experts.gate_up.shape()),
              shape_str(experts.down.shape()));
  const int64_t tokens = x.dim(0), hidden = x.dim(1), top_k = expert_ids.dim(1);
  const int64_t num_experts = experts.gate_up.dim(0), inter = experts.down.dim(2);
  PLUMB_CHECK(expert_ids.dim(0) == tokens, "{}: expert_ids {} for {} tokens", op, shape_str(expert_ids.shape()),
              tokens);
  expect_shape(expert_weights, {tokens, top_k}, op, "expert_weights");
  expect_shape(experts.gate_up, {num_experts, 2 * inter, hidden}, op, "gate_up");
  expect_shape(experts.down, {num_experts, hidden, inter}, op, "down");
  expect_shape(y, {tokens, hidden}, op, "y");
  PLUMB_CHECK(num_experts >= 1 && num_experts <= cuda::kMoeMaxExperts, "{}: {} experts (1 to {} supported)", op,
              num_experts, cuda::kMoeMaxExperts);
  PLUMB_CHECK(top_k >= 1 && top_k <= num_experts, "{}: top_k {} for {} experts", op, top_k, num_experts);
  PLUMB_CHECK(y.data() != x.data() || tokens == 0, "{}: y must not alias x", op);
  const int64_t pairs = tokens * top_k;
  expect_int32(pairs, op, "token-expert pairs");
  expect_int32(2 * inter, op, "gate_up features");
  expect_int32(hidden, op, "hidden size");
  if (tokens == 0) return;

  // One shape for both products (their row tiles come from one grouping), chosen by a typical expert's rows.
  const int64_t rows_per_expert = cuda::moe_rows_per_expert(pairs, num_experts);
  const bool wgmma = cuda::linear_wgmma_runs();
  // A pinned variant (the op harness's hook) takes both products, which must share their row tiles.
  const cuda::LinearShape gate_up_shape =
      linear_variant_
          ? linear_variant_->shape
          : cuda::choose_linear_shape(w_type, rows_per_expert, pairs, 2 * inter, wgmma, cuda::device_limits());
  const cuda::LinearShape down_shape =
      linear_variant_ ? linear_variant_->shape
                      : cuda::choose_linear_shape(w_type, rows_per_expert, pairs, hidden, wgmma, cuda::device_limits());
  PLUMB_CHECK(cuda::linear_tile_rows(down_shape) == cuda::linear_tile_rows(gate_up_shape),
              "{}: the two products disagree on row tiles", op);
  // No expert takes more rows than there are tokens (top_k picks distinct experts; repeated ids only split an
  // expert's rows over more tiles), so tiles of fewer rows than the shape's leave no tile fuller: a decode step's
  // tiles hold one row at batch 1, and the shared-memory ring sizes its stages by that.
  const int tile_rows = static_cast<int>(std::min<int64_t>(cuda::linear_tile_rows(gate_up_shape), tokens));
  const int64_t max_tiles = cuda::moe_max_tiles(pairs, num_experts, tile_rows);

  // Grouping: [pairs] row_token, [pairs] pair_row, [max_tiles, 3] tiles, [1] num_tiles.
  auto grouping = scratch(static_cast<size_t>(2 * pairs + 3 * max_tiles + 1) * sizeof(int32_t));
  auto* ints = static_cast<int32_t*>(grouping.get());
  cuda::MoeGroupParams group;
  group.expert_ids = expert_ids.data_as<const int32_t>();
  group.report = moe_id_report();
  group.pairs = static_cast<int32_t>(pairs);
  group.top_k = static_cast<int32_t>(top_k);
  group.experts = static_cast<int32_t>(num_experts);
  group.tile_rows = tile_rows;
  group.row_token = ints;
  group.pair_row = ints + pairs;
  group.tiles = ints + 2 * pairs;
  group.num_tiles = ints + 2 * pairs + 3 * max_tiles;
  enqueue("moe_group", [&] { cuda::launch_moe_group(group, fault_, stream_); });

  // gate_up product over each expert's rows, gathering x by token: [pairs, 2I] by sorted row.
  cuda::LinearParams gate_up;
  gate_up.shape = gate_up_shape;
  gate_up.x = x.data();
  const std::shared_ptr<void> x_bf16 = stage_bf16(x.f32(), tokens, hidden, gate_up_shape);  // [tokens, hidden]
  if (x_bf16) gate_up.x = x_bf16.get();
  auto gate_up_out = scratch(static_cast<size_t>(pairs * 2 * inter) * sizeof(float));  // [pairs, 2I]
  gate_up.x_index = group.row_token;
  gate_up.w = experts.gate_up.data();
  gate_up.w_type = w_type;
  gate_up.w_scales = weight_scales(experts.gate_up);
  gate_up.w_group_scales = weight_group_scales(experts.gate_up);
  gate_up.w_group_stride = 2 * inter * hidden;
  gate_up.y = static_cast<float*>(gate_up_out.get());
  gate_up.rows = static_cast<int32_t>(pairs);
  gate_up.n = static_cast<int32_t>(2 * inter);
  gate_up.k = static_cast<int32_t>(hidden);
  gate_up.tiles = group.tiles;
  gate_up.num_tiles = group.num_tiles;
  gate_up.max_tiles = static_cast<int32_t>(max_tiles);
  gate_up.tile_rows = tile_rows;
  const std::shared_ptr<void> gate_up_partials = plan_linear(gate_up, "moe_experts (gate_up)");
  enqueue("linear (moe gate_up)", [&] { cuda::launch_linear(gate_up, fault_, stream_); });

  // SiLU(gate) ⊙ up: [pairs, I], in the form the down product stages (F32 then slot order for the wgmma shape).
  const bool act_bf16 = cuda::linear_stages_bf16(down_shape) && !cuda::linear_stages_slot_order(down_shape);
  auto act = scratch(static_cast<size_t>(pairs * inter) * (act_bf16 ? sizeof(uint16_t) : sizeof(float)));
  cuda::MoeSiluMulParams silu;
  silu.gate_up = gate_up.y;
  silu.act = act.get();
  silu.act_bf16 = act_bf16;
  silu.rows = static_cast<int32_t>(pairs);
  silu.inter = static_cast<int32_t>(inter);
  enqueue("moe_silu_mul", [&] { cuda::launch_moe_silu_mul(silu, fault_, stream_); });

  // down product over the same tiles: [pairs, H] by sorted row.
  auto down_out = scratch(static_cast<size_t>(pairs * hidden) * sizeof(float));
  cuda::LinearParams down = gate_up;
  down.shape = down_shape;
  const std::shared_ptr<void> act_slots = cuda::linear_stages_slot_order(down_shape)
                                              ? stage_bf16(static_cast<const float*>(act.get()), pairs, inter,
                                                           down_shape)
                                              : nullptr;  // [pairs, I] BF16 in slot order
  down.x = act_slots ? act_slots.get() : act.get();
  down.x_index = nullptr;
  down.w = experts.down.data();
  down.w_scales = weight_scales(experts.down);
  down.w_group_scales = weight_group_scales(experts.down);
  down.w_group_stride = hidden * inter;
  down.y = static_cast<float*>(down_out.get());
  down.n = static_cast<int32_t>(hidden);
  down.k = static_cast<int32_t>(inter);
  down.k_split = 1;
  down.partials = nullptr;
  down.arrivals = nullptr;
  const std::shared_ptr<void> down_partials = plan_linear(down, "moe_experts (down)");
  enqueue("linear (moe down)", [&] { cuda::launch_linear(down, fault_, stream_); });

  cuda::MoeCombineParams combine;
  combine.down = down.y;
  combine.pair_row = group.pair_row;
  combine.weights = expert_weights.f32();
  combine.y = y.f32();
  combine.tokens = static_cast<int32_t>(tokens);
  combine.hidden = static_cast<int32_t>(hidden);
  combine.top_k = static_cast<int32_t>(top_k);
  enqueue("moe_combine", [&] { cuda::launch_moe_combine(combine, fault_, stream_); });
}

}  // namespace plumb
