// NVIDIA ModelOpt NVFP4 weights: packed E2M1 pairs, their E4M3 scale per group of 16 along K and the weight's one F32
// scale, checked to agree in shape and to hold no NaN or infinite scale, then kept in their own bytes as an E2M1
// weight (core/tensor.h) that shares the checkpoint's memory.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "loader/safetensors.h"

namespace plumb {

Tensor nvfp4_weight(const Tensor& weight, const Tensor& scale, const Tensor& scale_2, int64_t group,
                    const std::string& name) {
  PLUMB_CHECK(weight.device() == Device::kCpu && scale.device() == Device::kCpu && scale_2.device() == Device::kCpu,
              "{}: NVFP4 weights are read from host tensors", name);
  PLUMB_CHECK(weight.dtype() == DType::kU8 && weight.rank() == 2,
              "{}: expected a rank-2 U8 weight of packed E2M1 pairs, got {} {}", name, dtype_name(weight.dtype()),
              shape_str(weight.shape()));
  PLUMB_CHECK(group == kNvfp4GroupK, "{}: NVFP4 group size {} is not {}", name, group, kNvfp4GroupK);
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
  const auto* codes = scale.data_as<const uint8_t>();  // [rows, groups]
  for (int64_t i = 0; i < rows * groups; ++i) {
    const float value = fp8_e4m3_to_f32(codes[i]);
    PLUMB_CHECK(std::isfinite(value), "{}: weight_scale[{}, {}] is {}", name, i / groups, i % groups, value);
  }
  // The codes and group scales stay in the checkpoint's memory; the weight scale is repeated over the rows, so that
  // row views and stacks carry it.
  const Tensor codes_view(DType::kE2M1, {rows, cols}, Device::kCpu, weight.data(), weight.owner());
  const Tensor group_scales(DType::kF8E4M3, {rows, groups}, Device::kCpu, scale.data(), scale.owner());
  const Tensor globals = Tensor::from_f32(std::vector<float>(static_cast<size_t>(rows), global), {rows, 1});
  return codes_view.with_block_scales(globals).with_group_scales(group_scales);
}

}  // namespace plumb
