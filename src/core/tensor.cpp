#include "core/tensor.h"

#include <cstring>

#include "core/error.h"

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
  return Tensor(dtype_, std::move(s), device_, static_cast<char*>(data_) + begin * row_bytes, owner_);
}

Tensor Tensor::reshape(Shape shape) const {
  PLUMB_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_str(shape_), shape_str(shape));
  return Tensor(dtype_, std::move(shape), device_, data_, owner_);
}

}  // namespace plumb
