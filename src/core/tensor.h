// Tensor: a contiguous, row-major block of elements of one dtype on one device, with a shared owner that keeps its
// memory alive (a std::vector, a memory-mapped file, a device allocation). Views (rows, reshape) share the owner.
// Dimension order is outermost first: shape {T, H} means T rows of H elements.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace plumb {

enum class Device { kCpu, kCuda };

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, Device device, void* data, std::shared_ptr<void> owner);

  // A zero-filled host tensor.
  static Tensor zeros(DType dtype, Shape shape);
  // A host tensor holding a copy of values.
  static Tensor from_f32(const std::vector<float>& values, Shape shape);

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;  // negative i counts from the end
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  float* f32() const;  // checks dtype == kF32
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Rows [begin, end) of the outermost dimension, sharing memory.
  Tensor rows(int64_t begin, int64_t end) const;
  // The same memory under another shape with the same element count.
  Tensor reshape(Shape shape) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::kCpu;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

}  // namespace plumb
