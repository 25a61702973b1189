// Element types plumb reads from checkpoints and computes in, and exact host conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace plumb {

// kU8: raw bytes, as NVFP4 checkpoints store their packed E2M1 pairs. kE2M1: those pairs as a weight's elements, two
// a byte, element 2j in the low nibble of byte j (an NVFP4 weight, core/tensor.h; no checkpoint dtype).
enum class DType { kF32, kF16, kBF16, kF8E4M3, kI32, kI64, kU8, kE2M1 };

// Bytes per element; refuses kE2M1, whose elements are half a byte (dtype_bytes).
size_t dtype_size(DType dtype);
// Bytes of `count` elements: count · dtype_size, or count / 2 for kE2M1 (refused for an odd count).
size_t dtype_bytes(DType dtype, int64_t count);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string; returns false for one plumb does not read.
bool parse_dtype(std::string_view name, DType* out);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even, as torch does; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float f);
// OCP FP8 E4M3 ("fn": no infinities, 0x7f / 0xff are NaN, max finite 448).
float fp8_e4m3_to_f32(uint8_t bits);
// The nearest E4M3 value (ties to even), saturating: beyond ±448 gives ±448 (PTX cvt.rn.satfinite); NaN gives 0x7f.
uint8_t f32_to_fp8_e4m3(float f);
// The value of one E2M1 code (bit 3 the sign, then two exponent bits and one mantissa bit): ±{0, 0.5, 1, 1.5, 2, 3,
// 4, 6}.
float e2m1_to_f32(uint8_t code);

// Converts n elements of src (of type dtype) to float. Supports the float types above.
void convert_to_f32(DType dtype, const void* src, float* dst, size_t n);

}  // namespace plumb
