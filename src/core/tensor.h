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

// The K-width of an FP8 weight's block scales: the matrix products' K-slice (backends/cuda/kernels/linear.h), where a
// slice's partial sum takes its multiplier.
constexpr int64_t kWeightScaleBlockK = 128;
// The K-width of an NVFP4 weight's group scales (ModelOpt's group_size).
constexpr int64_t kNvfp4GroupK = 16;

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
  size_t nbytes() const { return dtype_bytes(dtype_, numel()); }
  // The bytes a product reads: nbytes() and a quantized weight's block and group scales.
  size_t bytes_with_scales() const {
    return nbytes() + (scales_ ? scales_->nbytes() : 0) + (group_scales_ ? group_scales_->nbytes() : 0);
  }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  float* f32() const;  // checks dtype == kF32
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Rows [begin, end) of the outermost dimension, sharing memory (and the rows' scales).
  Tensor rows(int64_t begin, int64_t end) const;
  // The same memory under another shape with the same element count. A tensor with scales keeps them only under a
  // shape with the same last dimension.
  Tensor reshape(Shape shape) const;

  // An FP8 (F8_E4M3) weight's multipliers, kept beside its bytes: [..., N, ceil(K / kWeightScaleBlockK)] F32 on the
  // same device for a weight [..., N, K], one per output row and K-slice (a checkpoint's 128 x 128 block scale is
  // repeated over its block's rows, so row views, stacks and row permutations carry their scales with them). Element
  // [n, k] means fp8(w[n, k]) * scales[n, k / 128]. An NVFP4 (E2M1) weight's: [..., N, 1] F32, the checkpoint's
  // weight_scale_2 repeated over its rows (stacked experts keep each their own). nullptr for any other tensor. Views
  // share them.
  const Tensor* block_scales() const { return scales_.get(); }
  // An NVFP4 weight's E4M3 scale per row and group of kNvfp4GroupK along K: F8_E4M3 [..., N, K / 16]. Element [n, k]
  // means e2m1(w[n, k]) * e4m3(group_scales[n, k / 16]) * block_scales[n, 0]. nullptr for any other tensor.
  const Tensor* group_scales() const { return group_scales_.get(); }
  // This tensor with `scales` attached (shape and dtype checked as above).
  Tensor with_block_scales(Tensor scales) const;
  Tensor with_group_scales(Tensor scales) const;
  // The shape of the block scales of an FP8 weight of `shape`, and of those of a weight of `dtype` (FP8 or E2M1).
  static Shape block_scales_shape(const Shape& shape);
  static Shape block_scales_shape(DType dtype, const Shape& shape);
  static Shape group_scales_shape(const Shape& shape);
  // Whether a backend's new tensor of `dtype` and `shape` is a quantized weight, which every backend makes with room
  // for its scales (make_with_scales).
  static bool needs_block_scales(DType dtype, const Shape& shape) {
    return (dtype == DType::kF8E4M3 || dtype == DType::kE2M1) && shape.size() >= 2;
  }
  static bool needs_group_scales(DType dtype, const Shape& shape) { return dtype == DType::kE2M1 && shape.size() >= 2; }
  // A backend's new tensor: make(dtype, shape) and, for a quantized weight, make's tensors for its scales.
  template <class Make>
  static Tensor make_with_scales(DType dtype, const Shape& shape, Make make) {
    Tensor t = make(dtype, shape);
    if (needs_block_scales(dtype, shape)) t = t.with_block_scales(make(DType::kF32, block_scales_shape(dtype, shape)));
    if (needs_group_scales(dtype, shape)) t = t.with_group_scales(make(DType::kF8E4M3, group_scales_shape(shape)));
    return t;
  }

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::kCpu;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
  std::shared_ptr<const Tensor> scales_;
  std::shared_ptr<const Tensor> group_scales_;
};

// F8_E4M3 bytes [..., K] widened to F32 with a multiplier per row and `block_k`-wide run of K: out[r, k] =
// fp8(bytes[r, k]) * row_scales[r, k / block_k], each product rounded once. row_scales: F32 [rows, ceil(K / block_k)]
// (rows: every dimension but the last). Host tensors.
Tensor expand_fp8_rows(const Tensor& bytes, const Tensor& row_scales, int64_t block_k);
// One row of it: out[c] = fp8(codes[c]) * scales[c / block_k] for c < k (codes [k], scales [ceil(k / block_k)],
// out [k] F32). The one widening the CPU reference and the loader share.
void widen_fp8_row(const uint8_t* codes, const float* scales, int64_t k, int64_t block_k, float* out);
// An FP8 weight with its block scales, widened to F32 (expand_fp8_rows with kWeightScaleBlockK).
Tensor widen_fp8_weight(const Tensor& weight);
// One row of an NVFP4 weight: out[c] = e2m1(codes[c]) * e4m3(group_scales[c / 16]) * global for c < k (codes: k / 2
// bytes, low nibble first; k a multiple of 16), rounded once (the first product is exact). The one widening the CPU
// reference and the loader share.
void widen_nvfp4_row(const uint8_t* codes, const uint8_t* group_scales, float global, int64_t k, float* out);
// An FP8 or NVFP4 weight widened to F32 (widen_fp8_row or widen_nvfp4_row on every row); any other tensor is refused.
Tensor widen_quantized(const Tensor& weight);

}  // namespace plumb
