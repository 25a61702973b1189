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
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
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
  const size_t row_bytes = static_cast<size_t>(shape_numel(shape_) / (shape_[0] ? shape_[0] : 1)) * dtype_size(dtype_);
  Tensor view(dtype_, std::move(s), device_, static_cast<char*>(data_) + begin * row_bytes, owner_);
  if (scales_) view.scales_ = std::make_shared<const Tensor>(scales_->rows(begin, end));
  return view;
}

Tensor Tensor::reshape(Shape shape) const {
  PLUMB_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_str(shape_), shape_str(shape));
  Tensor view(dtype_, shape, device_, data_, owner_);
  if (scales_) {
    PLUMB_CHECK(!shape.empty() && shape.back() == shape_.back(),
                "cannot reshape an FP8 weight {} to {}: its block scales follow its last dimension", shape_str(shape_),
                shape_str(shape));
    Shape scale_shape = shape;
    scale_shape.back() = scales_->shape().back();
    view.scales_ = std::make_shared<const Tensor>(scales_->reshape(std::move(scale_shape)));
  }
  return view;
}

Shape Tensor::block_scales_shape(const Shape& shape) {
  Shape scales = shape;
  if (!scales.empty()) scales.back() = (shape.back() + kWeightScaleBlockK - 1) / kWeightScaleBlockK;
  return scales;
}

Tensor Tensor::with_block_scales(Tensor scales) const {
  PLUMB_CHECK(needs_block_scales(dtype_, shape_),
              "block scales belong to an F8_E4M3 weight of rank 2 or more, not {} {}", dtype_name(dtype_),
              shape_str(shape_));
  const Shape want = block_scales_shape(shape_);
  PLUMB_CHECK(scales.dtype() == DType::kF32 && scales.shape() == want && scales.device() == device_,
              "block scales of a weight {} must be F32 {} on its device, not {} {}", shape_str(shape_), shape_str(want),
              dtype_name(scales.dtype()), shape_str(scales.shape()));
  Tensor out = *this;
  out.scales_ = std::make_shared<const Tensor>(std::move(scales));
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

}  // namespace plumb
