#include "core/dtype.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace plumb {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
    case DType::kE2M1:
      PLUMB_FAIL("E2M1 elements are half a byte: count their bytes with dtype_bytes");
  }
  PLUMB_FAIL("unknown dtype {}", static_cast<int>(dtype));
}

size_t dtype_bytes(DType dtype, int64_t count) {
  PLUMB_CHECK(count >= 0, "dtype_bytes: {} elements", count);
  if (dtype != DType::kE2M1) return static_cast<size_t>(count) * dtype_size(dtype);
  PLUMB_CHECK(count % 2 == 0, "{} E2M1 elements do not fill whole bytes (two a byte)", count);
  return static_cast<size_t>(count / 2);
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
    case DType::kE2M1:
      return "E2M1";
  }
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  static constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                   DType::kI32, DType::kI64, DType::kU8};
  for (DType d : kAll) {
    if (dtype_name(d) == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  float value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
  } else if (exponent == 31) {
    value = mantissa ? std::nanf("") : INFINITY;
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign ? -value : value;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal range: value = m * 2^-24, m rounded to nearest even.
    const float m = std::nearbyint(a * std::ldexp(1.0f, 24));
    return sign | static_cast<uint16_t>(m);
  }
  int e;
  std::frexp(a, &e);                                           // a = frac * 2^e, frac in [0.5, 1)
  const float scaled = std::nearbyint(std::ldexp(a, 11 - e));  // 11 significant bits, in [1024, 2048]
  uint32_t mant = static_cast<uint32_t>(scaled);
  int exp_field = e - 1 + 15;
  if (mant == 2048u) {
    mant = 1024u;
    ++exp_field;
  }
  if (exp_field >= 31) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>((exp_field << 10) | (mant & 0x3ffu));
}

float fp8_e4m3_to_f32(uint8_t bits) {
  const uint32_t sign = bits >> 7;
  const uint32_t exponent = (bits >> 3) & 0xfu;
  const uint32_t mantissa = bits & 0x7u;
  float value;
  if (exponent == 0xf && mantissa == 0x7) {
    value = std::nanf("");
  } else if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x8u), static_cast<int>(exponent) - 10);
  }
  return sign ? -value : value;
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a == 0.0f) return sign;
  if (a >= 448.0f) return sign | 0x7e;
  int e = 0;
  std::frexp(a, &e);  // a = m · 2^e, m in [0.5, 1)
  // Exponent of the leading bit, at least the subnormals' -6; the spacing there is 2^(exp - 3).
  const int exp = std::max(e - 1, -6);
  // a / spacing is exact in float; nearbyint rounds it to nearest even.
  const auto q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - exp)));  // 0..16
  if (exp == -6 && q < 8) return sign | static_cast<uint8_t>(q);            // subnormal (or zero)
  const int field = exp + 7 + (q == 16 ? 1 : 0);
  return sign | static_cast<uint8_t>(field << 3 | ((q == 16 ? 8 : q) - 8));
}

float e2m1_to_f32(uint8_t code) {
  // Exponent 0 is subnormal (0 and 0.5); exponents 1-3 scale 1.0 and 1.5 by 1, 2 and 4.
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitude[code & 7u];
  return (code & 8u) != 0 ? -magnitude : magnitude;
}

void convert_to_f32(DType dtype, const void* src, float* dst, size_t n) {
  if (n == 0) return;  // src and dst may be null for empty tensors
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(s[i]);
      return;
    }
    case DType::kE2M1: {
      // Packed pairs, low nibble first; n is even (whole bytes).
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = e2m1_to_f32(i % 2 == 0 ? s[i / 2] & 0xfu : s[i / 2] >> 4);
      return;
    }
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
      break;
  }
  PLUMB_FAIL("cannot convert {} to F32", dtype_name(dtype));
}

}  // namespace plumb
