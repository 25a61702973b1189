// The array comparison every fixture and op test uses (test::max_abs_diff): a NaN or an infinity anywhere in either
// array, the middle included, must make `err <= tol` false for any tolerance. The GPU harness's Verdict::close has
// the same test in tests/gpu/harness_test.cpp.
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
  constexpr int64_t n = 9;
  for (const test::NonFinitePair& p : test::kNonFinitePairs) {
    for (int64_t at : {int64_t{0}, int64_t{1}, n / 2, n - 1}) {
      std::vector<float> a(n, 2.0f), b(n, 2.0f);
      a[at == 0 ? 1 : 0] = 6.0f;
      a[at] = p.a;
      b[at] = p.b;
      const float err = test::max_abs_diff(a.data(), b.data(), n);
      EXPECT_FALSE(err <= kTolerance) << p.what << " at " << at << " of " << n << " gave " << err;
      EXPECT_FALSE(test::max_abs_diff(Tensor::from_f32(a, {3, 3}), Tensor::from_f32(b, {3, 3})) <= kTolerance)
          << p.what << " at " << at << " (Tensor overload)";
    }
  }
}

TEST(MaxAbsDiff, MismatchedSizesFail) {
  const Tensor a = Tensor::from_f32({1.0f, 2.0f}, {2}), b = Tensor::from_f32({1.0f, 2.0f, 3.0f}, {3});
  EXPECT_FALSE(test::max_abs_diff(a, b) <= kTolerance);
}

}  // namespace
}  // namespace plumb
