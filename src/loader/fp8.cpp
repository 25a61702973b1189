// Fine-grained block FP8 weights (DeepSeek-V3 style, as in the Qwen3-Next "-FP8" checkpoints; spec section 9):
// expands an F8_E4M3 weight and its per-block dequantisation multipliers (weight_scale_inv) to F32, after checking
// that the two agree in shape and that no multiplier is NaN or infinite.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "loader/safetensors.h"

namespace plumb {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0);
}

// All 256 E4M3 values, so the inner loop is a table lookup.
const std::array<float, 256>& fp8_e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = fp8_e4m3_to_f32(static_cast<uint8_t>(i));
    return t;
  }();
  return table;
}

}  // namespace

Tensor dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale_inv, int64_t block_rows, int64_t block_cols,
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

  Tensor out = Tensor::zeros(DType::kF32, {rows, cols});
  const auto* w = weight.data_as<const uint8_t>();  // [rows, cols]
  float* o = out.f32();                             // [rows, cols]
  const std::array<float, 256>& table = fp8_e4m3_table();
  // W[r, c] = fp8(Wq[r, c]) * s[r / block_rows, c / block_cols]; the last block of a row or column may be partial.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cols));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* w_row = w + r * cols;
      const float* s_row = scales.data() + (r / block_rows) * scale_cols;
      float* o_row = o + r * cols;
      for (int64_t b = 0; b < scale_cols; ++b) {
        const float s = s_row[b];
        const int64_t c_end = std::min(cols, (b + 1) * block_cols);
        for (int64_t c = b * block_cols; c < c_end; ++c) o_row[c] = table[w_row[c]] * s;
      }
    }
  });
  return out;
}

}  // namespace plumb
