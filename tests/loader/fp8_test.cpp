// Tests for FP8 E4M3 decoding and block dequantization: known bit patterns decode to their published values, and
// dequantize_fp8_blocks matches a plain per-element loop for every scale dtype, including partial edge blocks; a scale
// that does not fit the weight, or is not finite, fails naming the weight.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "loader/safetensors.h"
#include "support/fixtures.h"
#include "support/safetensors_writer.h"

namespace plumb {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TEST(Fp8E4M3Test, KnownBitPatterns) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_FALSE(std::signbit(fp8_e4m3_to_f32(0x00)));
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x80), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));      // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));  // largest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));      // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x39), 1.125f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x77), 240.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 holds finite values in the "fn" variant
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);  // largest finite
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
}

TEST(Fp8E4M3Test, OnlyTheTwoNanCodesAreNotFiniteAndPositiveCodesIncrease) {
  for (int bits = 0; bits < 256; ++bits) {
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(bits));
    EXPECT_EQ(std::isfinite(v), (bits & 0x7f) != 0x7f) << bits;
    if ((bits & 0x7f) != 0x7f) {
      EXPECT_EQ(fp8_e4m3_to_f32(static_cast<uint8_t>(bits ^ 0x80)), -v) << bits;
    }
  }
  for (int bits = 1; bits <= 0x7e; ++bits) {
    EXPECT_LT(fp8_e4m3_to_f32(static_cast<uint8_t>(bits - 1)), fp8_e4m3_to_f32(static_cast<uint8_t>(bits))) << bits;
  }
}

// An FP8 weight of the given shape filled with random non-NaN codes.
Tensor random_fp8(int64_t rows, int64_t cols, uint32_t seed) {
  Tensor w = Tensor::zeros(DType::kF8E4M3, {rows, cols});
  std::mt19937 rng(seed);
  auto* p = w.data_as<uint8_t>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    uint8_t code;
    do {
      code = static_cast<uint8_t>(rng());
    } while ((code & 0x7f) == 0x7f);
    p[i] = code;
  }
  return w;
}

// A scale tensor in `dtype` whose values (small multiples of powers of two) every scale dtype holds exactly.
Tensor scales_in(DType dtype, int64_t rows, int64_t cols) {
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = std::ldexp(static_cast<float>(1 + i % 7), static_cast<int>(i % 5) - 8);
  }
  const test::NamedTensor named = test::make_tensor("s", dtype, {rows, cols}, values);
  Tensor t = Tensor::zeros(dtype, {rows, cols});
  if (!named.bytes.empty()) std::memcpy(t.data(), named.bytes.data(), named.bytes.size());
  return t;
}

// W[n, k] = fp8(Wq[n, k]) * s[n / br, k / bc], written as directly as possible.
std::vector<float> reference_dequantize(const Tensor& w, const Tensor& s, int64_t br, int64_t bc) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  std::vector<float> scales(static_cast<size_t>(s.numel()));
  if (!scales.empty()) convert_to_f32(s.dtype(), s.data(), scales.data(), scales.size());
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t k = 0; k < cols; ++k) {
      out[n * cols + k] = fp8_e4m3_to_f32(w.data_as<uint8_t>()[n * cols + k]) * scales[(n / br) * s.dim(1) + k / bc];
    }
  }
  return out;
}

struct BlockCase {
  int64_t rows, cols, block_rows, block_cols;
};

TEST(DequantizeFp8Test, MatchesPlainLoopWithPartialBlocks) {
  const BlockCase cases[] = {{70, 45, 32, 16},     {64, 48, 32, 16}, {5, 3, 128, 128}, {1, 1, 1, 1},
                             {129, 257, 128, 128}, {0, 7, 4, 4},     {3, 0, 2, 2}};
  for (const DType scale_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const BlockCase& c : cases) {
      SCOPED_TRACE(fmt::format("{} [{}, {}] blocks [{}, {}]", dtype_name(scale_dtype), c.rows, c.cols, c.block_rows,
                               c.block_cols));
      const Tensor w = random_fp8(c.rows, c.cols, static_cast<uint32_t>(c.rows * 1000 + c.cols));
      const int64_t scale_rows = (c.rows + c.block_rows - 1) / c.block_rows;
      const int64_t scale_cols = (c.cols + c.block_cols - 1) / c.block_cols;
      const Tensor s = scales_in(scale_dtype, scale_rows, scale_cols);
      const Tensor out = dequantize_fp8_blocks(w, s, c.block_rows, c.block_cols, "q_proj.weight");
      EXPECT_EQ(out.dtype(), DType::kF32);
      ASSERT_EQ(out.shape(), Shape({c.rows, c.cols}));
      const std::vector<float> expected = reference_dequantize(w, s, c.block_rows, c.block_cols);
      // Both sides do the same single multiply, so they agree exactly; EXPECT_EQ fails on NaN.
      EXPECT_EQ(std::vector<float>(out.f32(), out.f32() + out.numel()), expected);
    }
  }
}

// Kept in its bytes, a weight carries one multiplier per row and 128-wide K-slice, and widens to exactly what
// dequantize_fp8_blocks makes: for blocks a multiple of the slice wide (each slice in one block) and for blocks wider
// than the whole row. Blocks narrower than a slice of a longer row are refused.
TEST(DequantizeFp8Test, KeptBytesWidenToTheDequantizedWeight) {
  const BlockCase cases[] = {
      {129, 257, 128, 128}, {70, 300, 32, 256}, {5, 3, 128, 128}, {40, 30, 16, 32}, {3, 0, 2, 2}};
  for (const BlockCase& c : cases) {
    SCOPED_TRACE(fmt::format("[{}, {}] blocks [{}, {}]", c.rows, c.cols, c.block_rows, c.block_cols));
    ASSERT_TRUE(fp8_blocks_follow_slices(c.cols, c.block_cols));
    const Tensor w = random_fp8(c.rows, c.cols, static_cast<uint32_t>(c.rows * 7 + c.cols));
    const Tensor s =
        scales_in(DType::kBF16, (c.rows + c.block_rows - 1) / c.block_rows, (c.cols + c.block_cols - 1) / c.block_cols);
    const Tensor kept = fp8_weight_with_scales(w, s, c.block_rows, c.block_cols, "w");
    EXPECT_EQ(kept.dtype(), DType::kF8E4M3);
    EXPECT_EQ(kept.data(), w.data());  // the bytes themselves, not a copy
    ASSERT_NE(kept.block_scales(), nullptr);
    EXPECT_EQ(kept.block_scales()->shape(), Shape({c.rows, (c.cols + 127) / 128}));
    const Tensor widened = widen_fp8_weight(kept);
    const Tensor want = dequantize_fp8_blocks(w, s, c.block_rows, c.block_cols, "w");
    EXPECT_EQ(std::vector<float>(widened.f32(), widened.f32() + widened.numel()),
              std::vector<float>(want.f32(), want.f32() + want.numel()));
  }
  EXPECT_FALSE(fp8_blocks_follow_slices(45, 32));
  const Tensor w = random_fp8(4, 45, 3);
  EXPECT_THAT([&] { fp8_weight_with_scales(w, scales_in(DType::kF32, 1, 2), 32, 32, "mlp.up_proj.weight"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("mlp.up_proj.weight"), HasSubstr("32 wide"))));
}

TEST(DequantizeFp8Test, EdgeBlocksUseTheirOwnScale) {
  // Every code is 1.0, so each output is exactly the scale of its block.
  Tensor w = Tensor::zeros(DType::kF8E4M3, {70, 45});
  std::memset(w.data(), 0x38, w.nbytes());
  std::vector<float> s_values(9);
  for (size_t i = 0; i < s_values.size(); ++i) s_values[i] = static_cast<float>(i + 1);
  const Tensor out = dequantize_fp8_blocks(w, Tensor::from_f32(s_values, {3, 3}), 32, 16, "w");
  EXPECT_EQ(out.f32()[0], 1.0f);             // block [0, 0]
  EXPECT_EQ(out.f32()[31 * 45 + 15], 1.0f);  // last element of block [0, 0]
  EXPECT_EQ(out.f32()[31 * 45 + 16], 2.0f);  // block [0, 1]
  EXPECT_EQ(out.f32()[32 * 45 + 0], 4.0f);   // block [1, 0]
  EXPECT_EQ(out.f32()[64 * 45 + 32], 9.0f);  // partial block [2, 2]
  EXPECT_EQ(out.f32()[69 * 45 + 44], 9.0f);  // last element
}

TEST(DequantizeFp8Test, NanCodesStayNan) {
  Tensor w = Tensor::zeros(DType::kF8E4M3, {1, 2});
  w.data_as<uint8_t>()[0] = 0x7f;
  w.data_as<uint8_t>()[1] = 0xff;
  const Tensor out = dequantize_fp8_blocks(w, Tensor::from_f32({2.0f}, {1, 1}), 128, 128, "w");
  EXPECT_TRUE(std::isnan(out.f32()[0]));
  EXPECT_TRUE(std::isnan(out.f32()[1]));
}

auto ErrorNaming(const std::string& a, const std::string& b) {
  return ThrowsMessage<Error>(AllOf(HasSubstr(a), HasSubstr(b)));
}

TEST(DequantizeFp8Test, WrongScaleShapeFails) {
  const Tensor w = random_fp8(70, 45, 1);
  const std::string name = "model.layers.3.self_attn.q_proj.weight";
  for (const Shape& shape : {Shape{2, 3}, Shape{3, 2}, Shape{3, 4}, Shape{9}, Shape{3, 3, 1}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor s = Tensor::zeros(DType::kF32, shape);
    EXPECT_THAT([&] { dequantize_fp8_blocks(w, s, 32, 16, name); }, ErrorNaming(name, "expected [3, 3]"));
  }
}

TEST(DequantizeFp8Test, WrongDtypesOrRankFail) {
  const Tensor w = Tensor::zeros(DType::kF8E4M3, {4, 4});
  const Tensor s = Tensor::from_f32({1.0f}, {1, 1});
  const Tensor bf16_weight = Tensor::zeros(DType::kBF16, {4, 4});
  const Tensor rank1_weight = Tensor::zeros(DType::kF8E4M3, {4});
  const Tensor i32_scale = Tensor::zeros(DType::kI32, {1, 1});
  EXPECT_THAT([&] { dequantize_fp8_blocks(bf16_weight, s, 128, 128, "wq"); }, ErrorNaming("wq", "F8_E4M3"));
  EXPECT_THAT([&] { dequantize_fp8_blocks(rank1_weight, s, 128, 128, "wq"); }, ErrorNaming("wq", "rank-2"));
  EXPECT_THAT([&] { dequantize_fp8_blocks(w, i32_scale, 128, 128, "wq"); }, ErrorNaming("wq", "I32"));
  EXPECT_THAT([&] { dequantize_fp8_blocks(w, s, 0, 128, "wq"); }, ErrorNaming("wq", "block size"));
}

TEST(DequantizeFp8Test, NonFiniteScaleFails) {
  const Tensor w = random_fp8(4, 4, 2);
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    SCOPED_TRACE(bad);
    const Tensor s = Tensor::from_f32({1.0f, 1.0f, 1.0f, bad}, {2, 2});
    EXPECT_THAT([&] { dequantize_fp8_blocks(w, s, 2, 2, "o_proj.weight"); },
                ErrorNaming("o_proj.weight", "weight_scale_inv[1, 1]"));
  }
}

TEST(DequantizeFp8Test, DequantizesTensorsReadFromACheckpoint) {
  // The layout of the official FP8 releases: an F8_E4M3 weight beside a BF16 weight_scale_inv.
  const std::string dir = test::scratch_dir("fp8-checkpoint");
  const Tensor w = random_fp8(70, 45, 3);
  const Tensor s = scales_in(DType::kBF16, 3, 3);
  const auto* wp = static_cast<const unsigned char*>(w.data());
  const auto* sp = static_cast<const unsigned char*>(s.data());
  test::write_safetensors(dir + "/model.safetensors",
                          {test::NamedTensor{"proj.weight", DType::kF8E4M3, {70, 45}, {wp, wp + w.nbytes()}},
                           test::NamedTensor{"proj.weight_scale_inv", DType::kBF16, {3, 3}, {sp, sp + s.nbytes()}}});
  const CheckpointFiles files = CheckpointFiles::open(dir);
  const Tensor out =
      dequantize_fp8_blocks(files.tensor("proj.weight"), files.tensor("proj.weight_scale_inv"), 32, 16, "proj.weight");
  EXPECT_EQ(std::vector<float>(out.f32(), out.f32() + out.numel()), reference_dequantize(w, s, 32, 16));
}

}  // namespace
}  // namespace plumb
