// The array comparison every fixture and op test uses (test::max_abs_diff): a NaN or an infinity anywhere in either
// array, the middle included, must make `err <= tol` false for any tolerance. The GPU harness's Verdict::close has
// the same test in tests/backends/cuda/harness_test.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "support/non_finite.h"
#include "support/random.h"

namespace plumb {
namespace {

// Larger than every finite difference below, so only a non-finite result can fail `err <= kTolerance`.
constexpr float kTolerance = 1e30f;

TEST(MaxAbsDiff, IsTheLargestDifferenceOfFiniteArrays) {
  const std::vector<float> a = {1.0f, 5.0f, -2.0f, 3.0f}, b = {1.5f, 1.0f, -2.0f, 3.25f};
  EXPECT_EQ(test::max_abs_diff(a.data(), b.data(), 4), 4.0f);
  EXPECT_EQ(test::max_abs_diff(a.data(), a.data(), 4), 0.0f);
}

// Differences {4, planted, 0, 0, ...}: the planted element sits after a larger finite difference and before smaller
// ones, at the start, in the middle and at the end.
TEST(MaxAbsDiff, ANonFiniteDifferenceAnywhereFailsTheTolerance) {
  for (const test::PlantedArrays& p : test::planted_arrays(6.0f)) {
    const float err = test::max_abs_diff(p.a.data(), p.b.data(), static_cast<int64_t>(p.a.size()));
    EXPECT_FALSE(err <= kTolerance) << p.what << " gave " << err;
    EXPECT_FALSE(test::max_abs_diff(Tensor::from_f32(p.a, {3, 3}), Tensor::from_f32(p.b, {3, 3})) <= kTolerance)
        << p.what << " (Tensor overload)";
  }
}

TEST(MaxAbsDiff, MismatchedSizesFail) {
  const Tensor a = Tensor::from_f32({1.0f, 2.0f}, {2}), b = Tensor::from_f32({1.0f, 2.0f, 3.0f}, {3});
  EXPECT_FALSE(test::max_abs_diff(a, b) <= kTolerance);
}

}  // namespace
}  // namespace plumb
