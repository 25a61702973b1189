#include "core/tensor.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"

namespace plumb {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor::Tensor(DType dtype, Shape shape, Device device, void* data, std::shared_ptr<void> owner)
    : dtype_(dtype), shape_(std::move(shape)), device_(device), data_(data), owner_(std::move(owner)) {}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  const size_t bytes = dtype_bytes(dtype, shape_numel(shape));
  // Round up to whole floats so any dtype's buffer is suitably aligned.
  auto storage = std::make_shared<std::vector<float>>((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
  void* data = storage->data();
  return Tensor(dtype, std::move(shape), Device::kCpu, data, std::move(storage));
}

Tensor Tensor::from_f32(const std::vector<float>& values, Shape shape) {
  PLUMB_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "from_f32: {} values for shape {}",
              values.size(), shape_str(shape));
  Tensor t = zeros(DType::kF32, std::move(shape));
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

int64_t Tensor::dim(int i) const {
  const int r = rank();
  const int k = i < 0 ? i + r : i;
  PLUMB_CHECK(k >= 0 && k < r, "dimension {} out of range for shape {}", i, shape_str(shape_));
  return shape_[k];
}

float* Tensor::f32() const {
  PLUMB_CHECK(dtype_ == DType::kF32, "expected an F32 tensor, got {}", dtype_name(dtype_));
  return static_cast<float*>(data_);
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  PLUMB_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows [{}, {}) of shape {}", begin, end,
              shape_str(shape_));
  Shape s = shape_;
  s[0] = end - begin;
  const size_t row_bytes = dtype_bytes(dtype_, shape_numel(shape_) / (shape_[0] ? shape_[0] : 1));
  Tensor view(dtype_, std::move(s), device_, static_cast<char*>(data_) + begin * row_bytes, owner_);
  if (scales_) view.scales_ = std::make_shared<const Tensor>(scales_->rows(begin, end));
  if (group_scales_) view.group_scales_ = std::make_shared<const Tensor>(group_scales_->rows(begin, end));
  return view;
}

Tensor Tensor::reshape(Shape shape) const {
  PLUMB_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_str(shape_), shape_str(shape));
  Tensor view(dtype_, shape, device_, data_, owner_);
  // A weight's scales follow its last dimension: the same rows under the new leading dimensions.
  const auto reshaped = [&](const std::shared_ptr<const Tensor>& scales) {
    PLUMB_CHECK(!shape.empty() && shape.back() == shape_.back(),
                "cannot reshape a {} weight {} to {}: its scales follow its last dimension", dtype_name(dtype_),
                shape_str(shape_), shape_str(shape));
    Shape scale_shape = shape;
    scale_shape.back() = scales->shape().back();
    return std::make_shared<const Tensor>(scales->reshape(std::move(scale_shape)));
  };
  if (scales_) view.scales_ = reshaped(scales_);
  if (group_scales_) view.group_scales_ = reshaped(group_scales_);
  return view;
}

Shape Tensor::block_scales_shape(const Shape& shape) {
  return block_scales_shape(DType::kF8E4M3, shape);
}

Shape Tensor::block_scales_shape(DType dtype, const Shape& shape) {
  Shape scales = shape;
  if (!scales.empty())
    scales.back() = dtype == DType::kE2M1 ? 1 : (shape.back() + kWeightScaleBlockK - 1) / kWeightScaleBlockK;
  return scales;
}

Shape Tensor::group_scales_shape(const Shape& shape) {
  Shape scales = shape;
  if (!scales.empty()) scales.back() = shape.back() / kNvfp4GroupK;
  return scales;
}

Tensor Tensor::with_block_scales(Tensor scales) const {
  PLUMB_CHECK(needs_block_scales(dtype_, shape_),
              "block scales belong to an F8_E4M3 or E2M1 weight of rank 2 or more, not {} {}", dtype_name(dtype_),
              shape_str(shape_));
  const Shape want = block_scales_shape(dtype_, shape_);
  PLUMB_CHECK(scales.dtype() == DType::kF32 && scales.shape() == want && scales.device() == device_,
              "block scales of a {} weight {} must be F32 {} on its device, not {} {}", dtype_name(dtype_),
              shape_str(shape_), shape_str(want), dtype_name(scales.dtype()), shape_str(scales.shape()));
  Tensor out = *this;
  out.scales_ = std::make_shared<const Tensor>(std::move(scales));
  return out;
}

Tensor Tensor::with_group_scales(Tensor scales) const {
  PLUMB_CHECK(needs_group_scales(dtype_, shape_) && shape_.back() % kNvfp4GroupK == 0,
              "group scales belong to an E2M1 weight of rank 2 or more and whole groups of {}, not {} {}", kNvfp4GroupK,
              dtype_name(dtype_), shape_str(shape_));
  const Shape want = group_scales_shape(shape_);
  PLUMB_CHECK(scales.dtype() == DType::kF8E4M3 && scales.shape() == want && scales.device() == device_,
              "group scales of an E2M1 weight {} must be F8_E4M3 {} on its device, not {} {}", shape_str(shape_),
              shape_str(want), dtype_name(scales.dtype()), shape_str(scales.shape()));
  Tensor out = *this;
  out.group_scales_ = std::make_shared<const Tensor>(std::move(scales));
  return out;
}

Tensor expand_fp8_rows(const Tensor& bytes, const Tensor& row_scales, int64_t block_k) {
  PLUMB_CHECK(bytes.device() == Device::kCpu && row_scales.device() == Device::kCpu &&
                  bytes.dtype() == DType::kF8E4M3 && row_scales.dtype() == DType::kF32 && bytes.rank() >= 1 &&
                  block_k > 0,
              "expand_fp8_rows: host F8_E4M3 bytes and F32 scales, not {} {} and {} {}", dtype_name(bytes.dtype()),
              shape_str(bytes.shape()), dtype_name(row_scales.dtype()), shape_str(row_scales.shape()));
  const int64_t cols = bytes.dim(-1), rows = cols > 0 ? bytes.numel() / cols : 0;
  const int64_t scale_cols = (cols + block_k - 1) / block_k;
  PLUMB_CHECK(row_scales.numel() == rows * scale_cols && row_scales.dim(-1) == scale_cols,
              "expand_fp8_rows: scales {} for {} rows of {} in blocks of {}", shape_str(row_scales.shape()), rows, cols,
              block_k);
  Tensor out = Tensor::zeros(DType::kF32, bytes.shape());
  const auto* w = bytes.data_as<const uint8_t>();      // [rows, cols]
  const float* s = row_scales.data_as<const float>();  // [rows, scale_cols]
  float* o = out.f32();                                // [rows, cols]
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cols));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) widen_fp8_row(w + r * cols, s + r * scale_cols, cols, block_k, o + r * cols);
  });
  return out;
}

void widen_fp8_row(const uint8_t* codes, const float* scales, int64_t k, int64_t block_k, float* out) {
  // All 256 E4M3 values, so the inner loop is a table lookup.
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = fp8_e4m3_to_f32(static_cast<uint8_t>(i));
    return t;
  }();
  for (int64_t b = 0; b * block_k < k; ++b) {
    const int64_t end = std::min(k, (b + 1) * block_k);
    for (int64_t c = b * block_k; c < end; ++c) out[c] = table[codes[c]] * scales[b];
  }
}

Tensor widen_fp8_weight(const Tensor& weight) {
  PLUMB_CHECK(weight.block_scales() != nullptr, "an F8_E4M3 weight {} has no block scales to widen it with",
              shape_str(weight.shape()));
  return expand_fp8_rows(weight, *weight.block_scales(), kWeightScaleBlockK);
}

void widen_nvfp4_row(const uint8_t* codes, const uint8_t* group_scales, float global, int64_t k, float* out) {
  for (int64_t g = 0; g * kNvfp4GroupK < k; ++g) {
    const float scale = fp8_e4m3_to_f32(group_scales[g]);
    for (int64_t c = g * kNvfp4GroupK; c < (g + 1) * kNvfp4GroupK; ++c) {
      const uint8_t byte = codes[c / 2];
      // e2m1 · e4m3 has at most 6 significant bits: exact in F32, so only the product with `global` rounds.
      out[c] = e2m1_to_f32(c % 2 == 0 ? byte & 0xfu : byte >> 4) * scale * global;
    }
  }
}

Tensor widen_quantized(const Tensor& weight) {
  if (weight.dtype() == DType::kF8E4M3) return widen_fp8_weight(weight);
  PLUMB_CHECK(weight.dtype() == DType::kE2M1 && weight.device() == Device::kCpu && weight.block_scales() != nullptr &&
                  weight.group_scales() != nullptr,
              "widen_quantized: a host FP8 or NVFP4 weight with its scales, not {} {}", dtype_name(weight.dtype()),
              shape_str(weight.shape()));
  Tensor out = Tensor::zeros(DType::kF32, weight.shape());
  const int64_t k = weight.dim(-1), rows = k > 0 ? weight.numel() / k : 0;
  const auto* codes = weight.data_as<const uint8_t>();                   // [rows, k / 2]
  const auto* groups = weight.group_scales()->data_as<const uint8_t>();  // [rows, k / 16]
  const float* global = weight.block_scales()->data_as<const float>();   // [rows]
  float* o = out.f32();                                                  // [rows, k]
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, k));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      widen_nvfp4_row(codes + r * (k / 2), groups + r * (k / kNvfp4GroupK), global[r], k, o + r * k);
  });
  return out;
}

}  // namespace plumb
