// The checks CudaBackend's ops make of their arguments before a launch, beside the shape checks every backend shares
// (ops/checks.h): a tensor on the GPU, of the dtype and rank the kernel reads, and sizes within the kernels' 32-bit
// indices. Each failure is a plumb::Error naming the op and the argument.
#pragma once

#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/tensor.h"

namespace plumb {

// The kernels index rows, features and elements with 32-bit integers.
inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

inline void expect_gpu(const Tensor& t, const char* op, const char* arg) {
  PLUMB_CHECK(t.device() == Device::kCuda, "{}: {} is not on the GPU", op, arg);
}

inline void expect_dtype(const Tensor& t, DType dtype, const char* op, const char* arg) {
  PLUMB_CHECK(t.dtype() == dtype, "{}: {} is {}, expected {}", op, arg, dtype_name(t.dtype()), dtype_name(dtype));
}

inline void expect_gpu(const Tensor& t, DType dtype, const char* op, const char* arg) {
  expect_gpu(t, op, arg);
  expect_dtype(t, dtype, op, arg);
}

inline void expect_gpu(const Tensor& t, DType dtype, int rank, const char* op, const char* arg) {
  expect_gpu(t, dtype, op, arg);
  PLUMB_CHECK(t.rank() == rank, "{}: {} has shape {}, expected rank {}", op, arg, shape_str(t.shape()), rank);
}

inline void expect_int32(int64_t value, const char* op, const char* what) {
  PLUMB_CHECK(value <= kInt32Max, "{}: {} {} is too large", op, what, value);
}

}  // namespace plumb
