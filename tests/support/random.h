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

// max |a - b| over all elements; NaN anywhere makes it NaN, so `!(err <= tol)` fails.
inline float max_abs_diff(const float* a, const float* b, int64_t n) {
  float err = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= err)) err = d;  // keeps NaN once seen
  }
  return err;
}

inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  return max_abs_diff(a.f32(), b.f32(), a.numel());
}

}  // namespace plumb::test
