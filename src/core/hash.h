// A fixed 64-bit hash (FNV-1a) over raw bytes, for comparing outputs and states bit for bit across runs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace plumb {

constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;

inline uint64_t fnv1a64(const void* data, size_t n, uint64_t hash = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace plumb
