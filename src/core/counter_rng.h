// Counter-based random numbers: a pure function of (seed, counter), so a seeded draw is the same on every machine,
// thread and device, whatever order the draws are made in. Host and CUDA code share this header.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PLUMB_HOST_DEVICE __host__ __device__
#else
#define PLUMB_HOST_DEVICE
#endif

namespace plumb {

// 64 random bits from (seed, counter): two rounds of the SplitMix64 finalizer over the pair.
PLUMB_HOST_DEVICE inline uint64_t bits_from_counter(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + counter + 0x632be59bd9b4e019ull;
  for (int round = 0; round < 2; ++round) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
  }
  return z;
}

// A uniform double in [0, 1) (53 random bits).
PLUMB_HOST_DEVICE inline double uniform_from_counter(uint64_t seed, uint64_t counter) {
  return static_cast<double>(bits_from_counter(seed, counter) >> 11) * 0x1.0p-53;
}

// A uniform float in [0, 1) (24 random bits).
PLUMB_HOST_DEVICE inline float uniform_f32_from_counter(uint64_t seed, uint64_t counter) {
  return static_cast<float>(bits_from_counter(seed, counter) >> 40) * 0x1.0p-24f;
}

}  // namespace plumb
