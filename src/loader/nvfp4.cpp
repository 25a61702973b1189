// NVIDIA ModelOpt NVFP4 weights: expands packed E2M1 pairs, their E4M3 scale per group of 16 along
// K and the weight's one F32 scale to F32, after checking that the three agree in shape and that no scale is NaN or
// infinite.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "loader/safetensors.h"

namespace plumb {

float e2m1_to_f32(uint8_t code) {
  // Exponent 0 is subnormal (0 and 0.5); exponents 1-3 scale 1.0 and 1.5 by 1, 2 and 4.
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitude[code & 7u];
  return (code & 8u) != 0 ? -magnitude : magnitude;
}

Tensor dequantize_nvfp4(const Tensor& weight, const Tensor& scale, const Tensor& scale_2, int64_t group,
                        const std::string& name) {
  PLUMB_CHECK(weight.device() == Device::kCpu && scale.device() == Device::kCpu && scale_2.device() == Device::kCpu,
              "{}: NVFP4 dequantization reads host tensors", name);
  PLUMB_CHECK(weight.dtype() == DType::kU8 && weight.rank() == 2,
              "{}: expected a rank-2 U8 weight of packed E2M1 pairs, got {} {}", name, dtype_name(weight.dtype()),
              shape_str(weight.shape()));
  PLUMB_CHECK(group > 0 && group % 2 == 0, "{}: NVFP4 group size {} is not a positive even number", name, group);
  const int64_t rows = weight.dim(0), cols = 2 * weight.dim(1);
  PLUMB_CHECK(cols % group == 0, "{}: {} input features are not whole NVFP4 groups of {}", name, cols, group);
  const int64_t groups = cols / group;
  PLUMB_CHECK(scale.dtype() == DType::kF8E4M3, "{}: weight_scale has dtype {}, expected F8_E4M3", name,
              dtype_name(scale.dtype()));
  PLUMB_CHECK(scale.shape() == Shape({rows, groups}),
              "{}: weight_scale has shape {}, expected [{}, {}] for a [{}, {}] weight in groups of {}", name,
              shape_str(scale.shape()), rows, groups, rows, cols, group);
  PLUMB_CHECK(scale_2.dtype() == DType::kF32 && scale_2.numel() == 1,
              "{}: weight_scale_2 is {} {}, expected one F32 value", name, dtype_name(scale_2.dtype()),
              shape_str(scale_2.shape()));
  const float global = *scale_2.f32();
  PLUMB_CHECK(std::isfinite(global), "{}: weight_scale_2 is {}", name, global);

  std::vector<float> scales(static_cast<size_t>(rows * groups));
  if (!scales.empty()) convert_to_f32(DType::kF8E4M3, scale.data(), scales.data(), scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    PLUMB_CHECK(std::isfinite(scales[i]), "{}: weight_scale[{}, {}] is {}", name, static_cast<int64_t>(i) / groups,
                static_cast<int64_t>(i) % groups, scales[i]);
  }

  Tensor out = Tensor::zeros(DType::kF32, {rows, cols});
  const auto* packed = weight.data_as<const uint8_t>();  // [rows, cols / 2]
  float* o = out.f32();                                  // [rows, cols]
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cols));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* p_row = packed + r * (cols / 2);
      const float* s_row = scales.data() + r * groups;
      float* o_row = o + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t byte = p_row[c / 2];
        const uint8_t code = c % 2 == 0 ? byte & 0xfu : byte >> 4;
        // e2m1 · e4m3 has at most 5 significant bits: exact in F32, so only the product with scale_2 rounds.
        o_row[c] = e2m1_to_f32(code) * s_row[c / group] * global;
      }
    }
  });
  return out;
}

}  // namespace plumb
