// Seeded random tensors for tests. The seed is printed by the test that uses it, so a failure can be replayed.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"

namespace plumb::test {

inline Tensor random_tensor(std::mt19937_64& rng, Shape shape, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& v : values) v = dist(rng);
  return Tensor::from_f32(values, std::move(shape));
}

// max |a - b| over all elements. A NaN anywhere (either side NaN, or an infinity on both sides) returns NaN and an
// infinity against a finite value returns +Inf, so `!(err <= tol)` fails for any non-finite difference wherever it is.
inline float max_abs_diff(const float* a, const float* b, int64_t n) {
  float err = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = std::fabs(a[i] - b[i]);
    // A plain running maximum would let the next finite difference replace a NaN (every comparison with NaN is false).
    if (std::isnan(d)) return d;
    if (d > err) err = d;
  }
  return err;
}

inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  return max_abs_diff(a.f32(), b.f32(), a.numel());
}

}  // namespace plumb::test
