// Host tensor helpers shared by the tests: an owned copy, and bit-for-bit comparison.
#pragma once

#include <cstring>

#include "core/tensor.h"

namespace plumb::test {

// A host tensor that owns a copy of t's elements (t itself may be a view of shared memory).
inline Tensor clone(const Tensor& t) {
  Tensor c = Tensor::zeros(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

// True when x and y hold the same bytes: the check behind every batch-invariance and determinism test.
inline bool same_bits(const Tensor& x, const Tensor& y) {
  return x.nbytes() == y.nbytes() && std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
}

}  // namespace plumb::test
