// Fine-grained block FP8 weights (DeepSeek-V3 style, as in the Qwen3-Next "-FP8" checkpoints; spec section 9): checks
// that an F8_E4M3 weight and its per-block dequantisation multipliers (weight_scale_inv) agree in shape and that no
// multiplier is NaN or infinite, then keeps the weight in its bytes with a multiplier per row and 128-wide K-slice, or
// (other block widths) expands it to F32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "loader/safetensors.h"

namespace plumb {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0);
}

}  // namespace

Tensor fp8_row_scales(const Tensor& weight, const Tensor& scale_inv, int64_t block_rows, int64_t block_cols,
                      const std::string& name) {
  PLUMB_CHECK(weight.device() == Device::kCpu && scale_inv.device() == Device::kCpu,
              "{}: FP8 dequantization reads host tensors", name);
  PLUMB_CHECK(weight.dtype() == DType::kF8E4M3, "{}: expected an F8_E4M3 weight, got {}", name,
              dtype_name(weight.dtype()));
  PLUMB_CHECK(weight.rank() == 2, "{}: expected a rank-2 FP8 weight, got shape {}", name, shape_str(weight.shape()));
  PLUMB_CHECK(block_rows > 0 && block_cols > 0, "{}: block size [{}, {}] is not positive", name, block_rows,
              block_cols);
  const DType scale_dtype = scale_inv.dtype();
  PLUMB_CHECK(scale_dtype == DType::kF32 || scale_dtype == DType::kBF16 || scale_dtype == DType::kF16,
              "{}: weight_scale_inv has dtype {}, expected F32, BF16 or F16", name, dtype_name(scale_dtype));
  const int64_t rows = weight.dim(0), cols = weight.dim(1);
  const int64_t scale_rows = ceil_div(rows, block_rows), scale_cols = ceil_div(cols, block_cols);
  PLUMB_CHECK(scale_inv.shape() == Shape({scale_rows, scale_cols}),
              "{}: weight_scale_inv has shape {}, expected [{}, {}] for weight {} in blocks of [{}, {}]", name,
              shape_str(scale_inv.shape()), scale_rows, scale_cols, shape_str(weight.shape()), block_rows, block_cols);

  std::vector<float> scales(static_cast<size_t>(scale_rows * scale_cols));
  // An empty buffer's data() may be null, which memcpy inside convert_to_f32 must not see.
  if (!scales.empty()) convert_to_f32(scale_dtype, scale_inv.data(), scales.data(), scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    PLUMB_CHECK(std::isfinite(scales[i]), "{}: weight_scale_inv[{}, {}] is {}", name,
                static_cast<int64_t>(i) / scale_cols, static_cast<int64_t>(i) % scale_cols, scales[i]);
  }
  Tensor out = Tensor::zeros(DType::kF32, {rows, scale_cols});  // [rows, scale_cols]
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(scales.data() + (r / block_rows) * scale_cols, scale_cols, out.f32() + r * scale_cols);
  return out;
}

Tensor dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale_inv, int64_t block_rows, int64_t block_cols,
                             const std::string& name) {
  return expand_fp8_rows(weight, fp8_row_scales(weight, scale_inv, block_rows, block_cols, name), block_cols);
}

bool fp8_blocks_follow_slices(int64_t k, int64_t block_cols) {
  return block_cols % kWeightScaleBlockK == 0 || k <= block_cols;
}

Tensor fp8_weight_with_scales(const Tensor& weight, const Tensor& scale_inv, int64_t block_rows, int64_t block_cols,
                              const std::string& name) {
  const Tensor blocks = fp8_row_scales(weight, scale_inv, block_rows, block_cols, name);  // [N, ceil(K / block_cols)]
  const int64_t rows = weight.dim(0), k = weight.dim(1);
  PLUMB_CHECK(fp8_blocks_follow_slices(k, block_cols),
              "{}: FP8 blocks {} wide do not cover whole {}-wide K-slices of a weight {}", name, block_cols,
              kWeightScaleBlockK, shape_str(weight.shape()));
  const int64_t slices = (k + kWeightScaleBlockK - 1) / kWeightScaleBlockK;
  Tensor scales = Tensor::zeros(DType::kF32, {rows, slices});  // [N, slices]: slice s lies in block s·128 / block_cols
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < slices; ++s)
      scales.f32()[r * slices + s] = blocks.f32()[r * blocks.dim(1) + s * kWeightScaleBlockK / block_cols];
  return weight.with_block_scales(scales);
}

}  // namespace plumb
