// The value pairs a numeric comparison must reject wherever they appear in an array: each makes |a - b| NaN or
// infinite. Shared by the tests of every comparison helper (tests/support/comparison_test.cpp, the op harness's
// Verdict test), so each is held to the same list.
#pragma once

#include <limits>

namespace plumb::test {

struct NonFinitePair {
  const char* what;
  float a, b;
};

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

inline constexpr NonFinitePair kNonFinitePairs[] = {
    {"NaN in a", kNaN, 1.0f},   {"NaN in b", 1.0f, kNaN},     {"+Inf in a", kInf, 1.0f},
    {"-Inf in b", 1.0f, -kInf}, {"+Inf in both", kInf, kInf}, {"+Inf against -Inf", kInf, -kInf},
};

}  // namespace plumb::test
