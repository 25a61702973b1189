// Host tensor helpers shared by the tests: an owned copy, bit-for-bit comparison, and float-type conversions.
#pragma once

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace plumb::test {

// A host tensor that owns a copy of t's elements (t itself may be a view of shared memory), and of a quantized
// weight's scales.
inline Tensor clone(const Tensor& t) {
  Tensor c = Tensor::zeros(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  if (const Tensor* scales = t.block_scales()) c = c.with_block_scales(clone(*scales));
  if (const Tensor* scales = t.group_scales()) c = c.with_group_scales(clone(*scales));
  return c;
}

// True when x and y hold the same bytes: the check behind every batch-invariance and determinism test.
inline bool same_bits(const Tensor& x, const Tensor& y) {
  return x.nbytes() == y.nbytes() && std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
}

// The host F32 tensor stored as `dtype` (F32, BF16, F16; round to nearest even).
inline Tensor to_dtype(const Tensor& f32, DType dtype) {
  Tensor out = Tensor::zeros(dtype, f32.shape());
  for (int64_t i = 0; i < f32.numel(); ++i) {
    const float v = f32.f32()[i];
    if (dtype == DType::kF32)
      out.f32()[i] = v;
    else if (dtype == DType::kBF16)
      out.data_as<uint16_t>()[i] = f32_to_bf16(v);
    else if (dtype == DType::kF16)
      out.data_as<uint16_t>()[i] = f32_to_f16(v);
    else
      PLUMB_FAIL("test to_dtype: {} is not a float type", dtype_name(dtype));
  }
  return out;
}

// The F32 values a host tensor of a float dtype represents.
inline Tensor to_f32(const Tensor& host) {
  if (host.dtype() == DType::kF32) return clone(host);
  Tensor out = Tensor::zeros(DType::kF32, host.shape());
  convert_to_f32(host.dtype(), host.data(), out.f32(), static_cast<size_t>(host.numel()));
  return out;
}

// The F32 values rounded to BF16 and back: values every backend stores exactly.
inline Tensor bf16_exact(const Tensor& f32) {
  return to_f32(to_dtype(f32, DType::kBF16));
}

}  // namespace plumb::test
