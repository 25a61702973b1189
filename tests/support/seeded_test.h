// A test fixture with a fresh random seed per test, printed through trace() so a failure can be replayed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

namespace plumb::test {

class SeededTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }
  // For SCOPED_TRACE: names the seed of this test's generator.
  std::string trace() const { return "seed " + std::to_string(seed_); }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace plumb::test
