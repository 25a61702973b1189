// The value pairs a numeric comparison must reject wherever they appear in an array: each makes |a - b| NaN or
// infinite. Shared by the tests of every comparison helper (tests/support/comparison_test.cpp, the op harness's
// Verdict test), so each is held to the same list.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

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

// Every planted array pair of n = 9 elements (3 x 3): each pair of kNonFinitePairs at the start, second, middle and
// last element, after (or, at the start, before) one larger finite difference `spread` - 2, and equal elsewhere.
struct PlantedArrays {
  std::string what;  // the pair and where it sits
  std::vector<float> a, b;
};
inline std::vector<PlantedArrays> planted_arrays(float spread) {
  constexpr int64_t n = 9;
  std::vector<PlantedArrays> out;
  for (const NonFinitePair& p : kNonFinitePairs) {
    for (int64_t at : {int64_t{0}, int64_t{1}, n / 2, n - 1}) {
      PlantedArrays planted{std::string(p.what) + " at " + std::to_string(at), std::vector<float>(n, 2.0f),
                            std::vector<float>(n, 2.0f)};
      planted.a[at == 0 ? 1 : 0] = spread;
      planted.a[at] = p.a;
      planted.b[at] = p.b;
      out.push_back(std::move(planted));
    }
  }
  return out;
}

}  // namespace plumb::test
