// Tests for core: BF16/F16 conversions (exhaustive round trips and round-to-nearest-even at every midpoint), dtype
// names, .npy round trips, parallel_for coverage and exception propagation, error kinds, and FNV-1a against published
// values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/npy.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "support/fixtures.h"

namespace plumb {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(DTypeTest, NamesRoundTrip) {
  for (const DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI32, DType::kI64, DType::kU8}) {
    DType parsed;
    ASSERT_TRUE(parse_dtype(dtype_name(d), &parsed)) << dtype_name(d);
    EXPECT_EQ(parsed, d);
  }
  DType parsed;
  EXPECT_FALSE(parse_dtype("F8_E5M2", &parsed));
  EXPECT_FALSE(parse_dtype("f32", &parsed));
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kU8), 1u);
  int32_t i = 1;
  float f;
  EXPECT_THROW(convert_to_f32(DType::kI32, &i, &f, 1), Error);
}

TEST(Bf16Test, EveryValueRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = bf16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << bits;
    } else {
      EXPECT_EQ(f32_to_bf16(f), bits) << bits;
    }
  }
}

TEST(Bf16Test, MidpointsRoundToEven) {
  // A BF16 value is the top half of an F32, so 0x8000 in the low half is exactly halfway to the next one.
  for (uint32_t hi = 0; hi < 0x7f80; ++hi) {
    for (const uint32_t sign : {0u, 0x8000u}) {
      const uint32_t base = (hi | sign) << 16;
      const uint16_t even = static_cast<uint16_t>((hi & 1u ? hi + 1 : hi) | sign);
      ASSERT_EQ(f32_to_bf16(from_bits(base | 0x8000u)), even) << hi;
      ASSERT_EQ(f32_to_bf16(from_bits(base | 0x7fffu)), hi | sign) << hi;
      ASSERT_EQ(f32_to_bf16(from_bits(base | 0x8001u)), (hi + 1) | sign) << hi;
    }
  }
}

TEST(Bf16Test, SpecialValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie, down to even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie, up to even
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);         // rounds up to infinity
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);  // below half of 0x0001
  EXPECT_EQ(f32_to_bf16(from_bits(0x00010000u)), 0x0001);                    // smallest subnormal
  // A NaN whose payload lives only in the low half must not truncate to infinity.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(0xff800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(F16Test, EveryValueRoundTrips) {
  int nans = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = f16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      ++nans;
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << bits;
    } else {
      EXPECT_EQ(f32_to_f16(f), bits) << bits;
    }
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(F16Test, MidpointsRoundToEven) {
  // Adjacent halves differ in the 11th significant bit, so their midpoint, and the floats either side of it, are
  // exact in F32. Above the largest finite half (65504) the next step is 65536, which rounds to infinity.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = f16_to_f32(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : f16_to_f32(static_cast<uint16_t>(h + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << h;
    const uint16_t even = static_cast<uint16_t>(h & 1u ? h + 1 : h);
    for (const uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(f32_to_f16(s * mid), even | sign) << h;
      ASSERT_EQ(f32_to_f16(s * std::nextafter(mid, 0.0f)), h | sign) << h;
      ASSERT_EQ(f32_to_f16(s * std::nextafter(mid, INFINITY)), (h + 1) | sign) << h;
    }
  }
}

TEST(F16Test, SpecialValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, down to even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, up to even
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::max()), 0xfc00);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);                          // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);                          // tie, down to zero
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);                      // tie, up to even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);  // largest subnormal rounds up
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-30f), 0x8000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
}

TEST(NpyTest, RoundTrips) {
  const std::string dir = test::scratch_dir("npy");
  for (const Shape& shape : {Shape{2, 3}, Shape{5}, Shape{}, Shape{1, 0}, Shape{2, 1, 3, 1}}) {
    SCOPED_TRACE(shape_str(shape));
    std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * -1.25f + 0.1f;
    const std::string path = dir + "/a.npy";
    write_npy_f32(path, values.data(), shape);
    const NpyArray read = read_npy_f32(path);
    EXPECT_EQ(read.shape, shape);
    EXPECT_EQ(read.values, values);
  }
}

TEST(NpyTest, BadFilesFailNamingTheFile) {
  const std::string dir = test::scratch_dir("npy-bad");
  const std::string missing = dir + "/missing.npy";
  EXPECT_THAT([&] { read_npy_f32(missing); }, ThrowsMessage<Error>(HasSubstr(missing)));
  const std::string text = dir + "/text.npy";
  std::ofstream(text) << "not an npy file";
  EXPECT_THAT([&] { read_npy_f32(text); }, ThrowsMessage<Error>(AllOf(HasSubstr(text), HasSubstr(".npy"))));
  const std::string cut = dir + "/cut.npy";
  const std::vector<float> values(16, 1.0f);
  write_npy_f32(cut, values.data(), {16});
  std::filesystem::resize_file(cut, std::filesystem::file_size(cut) - 4);
  EXPECT_THAT([&] { read_npy_f32(cut); }, ThrowsMessage<Error>(AllOf(HasSubstr(cut), HasSubstr("truncated"))));
}

TEST(ParallelForTest, CoversEveryIndexExactlyOnce) {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
    for (const int64_t grain : {int64_t{1}, int64_t{3}, int64_t{64}}) {
      SCOPED_TRACE(fmt::format("n={} grain={}", n, grain));
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad_ranges{0};
      parallel_for(n, grain, [&](int64_t begin, int64_t end) {
        if (!(0 <= begin && begin < end && end <= n)) ++bad_ranges;
        for (int64_t i = begin; i < end && 0 <= i && i < n; ++i) ++hits[static_cast<size_t>(i)];
      });
      EXPECT_EQ(bad_ranges.load(), 0);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
  }
}

TEST(ParallelForTest, PropagatesExceptions) {
  // The first index lands on the calling thread, the last on a worker when there is more than one thread.
  for (const int64_t bad : {int64_t{0}, int64_t{500}, int64_t{999}}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(
        [&] {
          parallel_for(1000, 1, [&](int64_t begin, int64_t end) {
            PLUMB_CHECK(!(begin <= bad && bad < end), "index {} failed", bad);
          });
        },
        ThrowsMessage<Error>(HasSubstr(fmt::format("index {} failed", bad))));
  }
  // The pool is still usable after a failed job.
  std::atomic<int64_t> sum{0};
  parallel_for(100, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

// Error kind: the fuzz harness counts a kInternal error as a crash and a kInput one as a rejected input, so each macro
// must raise its own kind.
Error::Kind kind_thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "nothing was thrown";
  return Error::Kind::kInput;
}

TEST(ErrorTest, InternalChecksAreToldApartFromInputChecks) {
  EXPECT_EQ(kind_thrown([] { PLUMB_CHECK(1 + 1 == 3, "bad input {}", 3); }), Error::Kind::kInput);
  EXPECT_EQ(kind_thrown([] { PLUMB_FAIL("bad input"); }), Error::Kind::kInput);
  EXPECT_EQ(kind_thrown([] { PLUMB_INTERNAL_CHECK(1 + 1 == 3, "broken invariant {}", 3); }), Error::Kind::kInternal);
  EXPECT_THAT([] { PLUMB_INTERNAL_CHECK(false, "broken invariant {}", 3); },
              ThrowsMessage<Error>(HasSubstr("internal error: broken invariant 3")));
  EXPECT_NO_THROW(PLUMB_INTERNAL_CHECK(true, "never"));
}

TEST(HashTest, Fnv1a64MatchesPublishedValues) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ull);
  // Hashing in pieces continues from the running value.
  EXPECT_EQ(fnv1a64("bar", 3, fnv1a64("foo", 3)), fnv1a64("foobar", 6));
}

}  // namespace
}  // namespace plumb

namespace plumb {
namespace {

// An FP8 weight's block scales follow its rows through views (rows of a stack, an expert of a 3-D stack reshaped to a
// matrix), are refused in the wrong shape, dtype or place, and forbid a reshape that moves its last dimension.
TEST(TensorBlockScalesTest, ViewsCarryTheirRowsScales) {
  Tensor bytes = Tensor::zeros(DType::kF8E4M3, {3, 4, 300});  // 3 experts of [4, 300]: 3 slices a row
  Tensor scales = Tensor::zeros(DType::kF32, {3, 4, 3});
  for (int64_t i = 0; i < scales.numel(); ++i) scales.f32()[i] = static_cast<float>(i);
  const Tensor w = bytes.with_block_scales(scales);
  ASSERT_NE(w.block_scales(), nullptr);
  const Tensor expert = w.rows(1, 2).reshape({4, 300});
  ASSERT_NE(expert.block_scales(), nullptr);
  EXPECT_EQ(expert.block_scales()->shape(), Shape({4, 3}));
  EXPECT_EQ(expert.block_scales()->f32()[0], 12.0f);  // expert 1, row 0, slice 0
  const Tensor rows = expert.rows(2, 4);
  EXPECT_EQ(rows.block_scales()->f32()[0], 18.0f);  // expert 1, row 2, slice 0
  EXPECT_EQ(rows.block_scales()->shape(), Shape({2, 3}));
  EXPECT_EQ(Tensor::zeros(DType::kF8E4M3, {2, 2}).block_scales(), nullptr);

  EXPECT_THAT([&] { (void)w.reshape({3, 1200}); }, ThrowsMessage<Error>(HasSubstr("last dimension")));
  EXPECT_THAT(
      [&] {
        (void)bytes.with_block_scales(Tensor::zeros(DType::kF32, {3, 4, 2}));
      },
      ThrowsMessage<Error>(HasSubstr("[3, 4, 3]")));
  EXPECT_THAT(
      [&] {
        (void)bytes.with_block_scales(Tensor::zeros(DType::kBF16, {3, 4, 3}));
      },
      ThrowsMessage<Error>(HasSubstr("F32")));
  EXPECT_THAT(
      [&] {
        (void)Tensor::zeros(DType::kBF16, {4, 300}).with_block_scales(Tensor::zeros(DType::kF32, {4, 3}));
      },
      ThrowsMessage<Error>(HasSubstr("F8_E4M3")));
}

// An NVFP4 (E2M1) weight packs two codes a byte, and its scales (one a row, one per row and group of 16) follow its
// rows through views; widen_quantized gives e2m1 · e4m3 · scale for every element.
TEST(TensorBlockScalesTest, Nvfp4WeightsPackTwoCodesAByteAndCarryBothScales) {
  EXPECT_EQ(dtype_bytes(DType::kE2M1, 64), 32u);
  EXPECT_EQ(dtype_bytes(DType::kBF16, 3), 6u);
  EXPECT_THAT([] { (void)dtype_bytes(DType::kE2M1, 3); }, ThrowsMessage<Error>(HasSubstr("whole bytes")));
  EXPECT_THAT([] { (void)dtype_size(DType::kE2M1); }, ThrowsMessage<Error>(HasSubstr("dtype_bytes")));

  Tensor codes = Tensor::zeros(DType::kE2M1, {2, 3, 32});  // 2 experts of [3, 32]: 2 groups a row
  ASSERT_EQ(codes.nbytes(), 96u);
  auto* bytes = codes.data_as<uint8_t>();
  for (int i = 0; i < 96; ++i) bytes[i] = static_cast<uint8_t>(0x9a);  // low nibble 0xa (-1.0), high 0x9 (-0.5)
  bytes[80] = 0x7f;  // expert 1, row 2, k 0 and 1: codes 0xf (-6) and 0x7 (6)
  Tensor groups = Tensor::zeros(DType::kF8E4M3, {2, 3, 2});
  for (int i = 0; i < 12; ++i) groups.data_as<uint8_t>()[i] = static_cast<uint8_t>(0x38 + 8 * (i % 2));  // 1.0, 2.0
  const Tensor w =
      codes.with_block_scales(Tensor::from_f32({1, 1, 1, 0.5f, 0.5f, 0.25f}, {2, 3, 1})).with_group_scales(groups);
  EXPECT_EQ(w.bytes_with_scales(), 96u + 24u + 12u);
  const Tensor expert = w.rows(1, 2).reshape({3, 32});
  ASSERT_NE(expert.group_scales(), nullptr);
  EXPECT_EQ(expert.group_scales()->shape(), Shape({3, 2}));
  const Tensor row = expert.rows(2, 3);
  EXPECT_EQ(row.block_scales()->f32()[0], 0.25f);
  const Tensor f = widen_quantized(row);  // [1, 32]
  EXPECT_EQ(f.f32()[0], -6.0f * 0.25f);   // code 0xf: -6
  EXPECT_EQ(f.f32()[1], 6.0f * 0.25f);    // code 0x7: 6
  EXPECT_EQ(f.f32()[2], -1.0f * 0.25f);
  EXPECT_EQ(f.f32()[3], -0.5f * 0.25f);
  EXPECT_EQ(f.f32()[16], -1.0f * 2.0f * 0.25f);  // the second group's scale, 2
  std::vector<float> converted(4);
  convert_to_f32(DType::kE2M1, bytes, converted.data(), 4);
  EXPECT_EQ(converted, std::vector<float>({-1.0f, -0.5f, -1.0f, -0.5f}));

  EXPECT_THAT([&] { (void)w.reshape({2, 96}); }, ThrowsMessage<Error>(HasSubstr("last dimension")));
  EXPECT_THAT(
      [&] {
        (void)codes.with_group_scales(Tensor::zeros(DType::kF8E4M3, {2, 3, 4}));
      },
      ThrowsMessage<Error>(HasSubstr("[2, 3, 2]")));
  EXPECT_THAT(
      [&] {
        (void)codes.with_block_scales(Tensor::zeros(DType::kF32, {2, 3, 2}));
      },
      ThrowsMessage<Error>(HasSubstr("[2, 3, 1]")));
  EXPECT_THAT(
      [&] {
        (void)Tensor::zeros(DType::kE2M1, {2, 8}).with_group_scales(Tensor::zeros(DType::kF8E4M3, {2, 0}));
      },
      ThrowsMessage<Error>(HasSubstr("whole groups of 16")));
  EXPECT_THAT([&] { (void)widen_quantized(codes); }, ThrowsMessage<Error>(HasSubstr("with its scales")));
}

// widen_fp8_weight multiplies each code by its row's multiplier for the code's 128-wide slice.
TEST(TensorBlockScalesTest, WidenAppliesEachSlicesMultiplier) {
  Tensor bytes = Tensor::zeros(DType::kF8E4M3, {2, 130});
  std::memset(bytes.data(), 0x38, bytes.nbytes());  // 1.0 everywhere
  const Tensor w = bytes.with_block_scales(Tensor::from_f32({2.0f, 3.0f, 5.0f, 7.0f}, {2, 2}));
  const Tensor f = widen_fp8_weight(w);
  EXPECT_EQ(f.f32()[0], 2.0f);
  EXPECT_EQ(f.f32()[127], 2.0f);
  EXPECT_EQ(f.f32()[128], 3.0f);
  EXPECT_EQ(f.f32()[130 + 5], 5.0f);
  EXPECT_EQ(f.f32()[130 + 129], 7.0f);
  EXPECT_THAT([&] { (void)widen_fp8_weight(bytes); }, ThrowsMessage<Error>(HasSubstr("no block scales")));
}

}  // namespace
}  // namespace plumb

namespace plumb {
namespace {

// Every finite E4M3 code survives the round trip through F32; halfway values round to the even code; values past the
// largest finite one saturate to it and NaN stays NaN.
TEST(Fp8RoundingTest, NearestEvenAndSaturating) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(static_cast<uint8_t>(code))), code) << code;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);                // halfway between 1 and 1.125: to even (1)
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);                // halfway between 1.125 and 1.25: to even (1.25)
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.5f, -9)), 0x02);   // halfway between subnormals 1 and 2: to 2
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -11)), 0x00);  // a quarter of the smallest subnormal: zero
  EXPECT_EQ(f32_to_fp8_e4m3(-1e9f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(460.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(std::nanf("")), 0x7f);
}

}  // namespace
}  // namespace plumb
