// Harness cases of the matrix-product family: linear, the MoE router and the routed experts. Bounds per
// docs/kernel-contract.md §Matrix products.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "backends/cuda/kernels/experts.h"
#include "backends/cuda/kernels/linear.h"
#include "backends/cuda/kernels/sample.h"
#include "core/error.h"
#include "op_harness.h"

namespace plumb::harness {
namespace {

constexpr int64_t kRowCounts[] = {1, 63, 64, 65, 1000};
// linear's row counts reach every launch shape: the decode shapes of up to 8 (1, and the 5-row slices the rows-alone
// check runs), 16 (13), 32 (29) and 64 rows (63, 64), and the tiled prefill shapes (65, 1000).
constexpr int64_t kLinearRowCounts[] = {1, 13, 29, 63, 64, 65, 1000};

// A weight [..., N, K] of `dtype` and the F32 values it stores.
struct Weight {
  Tensor stored;
  Tensor values;
};

// FP8 as checkpoints store it: E4M3 codes, every finite one equally likely (zeros and subnormals included; the two
// NaN codes never), and a multiplier per 128 x 128 block of each [N, K] matrix, log-uniform within a factor of 4 of
// 1 / (32 sqrt(K)), repeated over the block's rows as block scales. Neighbouring slices and 128-row blocks get
// different multipliers, so a multiplier applied to the wrong slice or feature changes the result.
Tensor random_fp8(std::mt19937_64& rng, const Shape& shape) {
  Tensor codes = Tensor::zeros(DType::kF8E4M3, shape);
  std::uniform_int_distribution<int> code(0, 253);
  for (int64_t i = 0; i < codes.numel(); ++i) {
    const int c = code(rng);
    codes.data_as<uint8_t>()[i] = static_cast<uint8_t>(c < 127 ? c : c + 1);  // skips 0x7f; 254 -> 0xff never
  }
  const int64_t K = shape.back(), N = shape[shape.size() - 2], slices = (K + 127) / 128;
  const int64_t matrices = codes.numel() / std::max<int64_t>(N * K, 1), block_rows = (N + 127) / 128;
  std::uniform_real_distribution<float> log4(-1.0f, 1.0f);
  std::vector<float> blocks(static_cast<size_t>(matrices * block_rows * slices));
  for (float& b : blocks) b = std::pow(4.0f, log4(rng)) / (32.0f * std::sqrt(static_cast<float>(K)));
  Shape scale_shape = shape;
  scale_shape.back() = slices;
  Tensor scales = Tensor::zeros(DType::kF32, scale_shape);
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < slices; ++s)
        scales.f32()[(m * N + n) * slices + s] = blocks[static_cast<size_t>((m * block_rows + n / 128) * slices + s)];
  return codes.with_block_scales(scales);
}

// NVFP4 as checkpoints store it: E2M1 codes, every one of the 16 equally likely, an E4M3 scale per row and 16 k drawn
// from the positive normal codes of 2^-3 to 2^3 (so neighbouring groups' scales differ, and a scale applied to the
// wrong group or a code read from the wrong nibble changes the result), and one weight scale per [N, K] matrix near
// 1 / (8 sqrt(K)), repeated over its rows as the block scales. K must be whole groups of 16 (whole_groups).
Tensor random_nvfp4(std::mt19937_64& rng, const Shape& shape) {
  Tensor codes = Tensor::zeros(DType::kE2M1, shape);
  std::uniform_int_distribution<int> byte(0, 255), scale_code(0x20, 0x50);
  for (size_t i = 0; i < codes.nbytes(); ++i) codes.data_as<uint8_t>()[i] = static_cast<uint8_t>(byte(rng));
  Tensor groups = Tensor::zeros(DType::kF8E4M3, Tensor::group_scales_shape(shape));
  for (int64_t i = 0; i < groups.numel(); ++i) groups.data_as<uint8_t>()[i] = static_cast<uint8_t>(scale_code(rng));
  const int64_t K = shape.back(), N = shape[shape.size() - 2];
  Tensor scales = Tensor::zeros(DType::kF32, Tensor::block_scales_shape(DType::kE2M1, shape));
  std::uniform_real_distribution<float> spread(0.5f, 2.0f);
  for (int64_t m = 0; m * N < scales.numel(); ++m) {
    const float scale = spread(rng) / (8.0f * std::sqrt(static_cast<float>(K)));
    std::fill_n(scales.f32() + m * N, N, scale);
  }
  return codes.with_block_scales(scales).with_group_scales(groups);
}

// K of a case's shape for weights of `dtype`: NVFP4 weights come in whole groups of 16, so K rounds up to the next
// (48 for 40, 80 for 77: still no multiple of 32 or 128).
int64_t whole_groups(int64_t K, DType dtype) {
  return dtype == DType::kE2M1 ? (K + kNvfp4GroupK - 1) / kNvfp4GroupK * kNvfp4GroupK : K;
}

// Entries ~ N(0, 1/sqrt(K)) rounded to `dtype`, or random FP8 or NVFP4 codes and scales (random_fp8, random_nvfp4).
Weight random_weight(std::mt19937_64& rng, const Shape& shape, DType dtype) {
  if (dtype == DType::kF8E4M3 || dtype == DType::kE2M1) {
    const Tensor stored = dtype == DType::kF8E4M3 ? random_fp8(rng, shape) : random_nvfp4(rng, shape);
    return {stored, widen_quantized(stored)};
  }
  const Tensor stored = to_dtype(normal(rng, shape, 1.0f / std::sqrt(static_cast<float>(shape.back()))), dtype);
  return {stored, to_f32(stored)};
}

// The kernels' name for a weight dtype.
cuda::LinearWeights linear_weights(DType dtype) {
  if (dtype == DType::kF8E4M3) return cuda::LinearWeights::kFp8;
  if (dtype == DType::kE2M1) return cuda::LinearWeights::kNvfp4;
  return dtype == DType::kBF16 ? cuda::LinearWeights::kBF16 : cuda::LinearWeights::kF32;
}

// linear's bound for every element of x [T, K] times w [N, K].
std::vector<double> linear_bound(const Tensor& x, const Weight& w, DType dtype) {
  const int64_t T = x.dim(0), K = x.dim(1), N = w.values.dim(0);
  std::vector<double> bound(static_cast<size_t>(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double abs_sum = 0;
      for (int64_t k = 0; k < K; ++k) abs_sum += std::fabs(x.f32()[t * K + k] * w.values.f32()[n * K + k]);
      bound[t * N + n] = dot_bound(K, abs_sum, dtype);
    }
  return bound;
}

// be.linear of rows [begin, end) of x, into a poisoned output; the host result.
Tensor run_linear(Backend& be, const Tensor& x, const Weight& w, int64_t begin, int64_t end) {
  Tensor y = poisoned(be, DType::kF32, {end - begin, w.stored.dim(0)});
  be.linear(be.upload(x.rows(begin, end)), be.upload(w.stored), y);
  return fetch_f32(be, y);
}

void linear_case(Context& c, DType dtype) {
  // K = 77 is a multiple neither of 8 (the F32 kernel's groups, the 16-byte loads) nor of 32 (a k-chunk).
  for (auto [k, N] : {std::pair<int64_t, int64_t>{40, 1}, {40, 77}, {77, 33}, {2048, 130}}) {
    const int64_t K = whole_groups(k, dtype);
    const Weight w = random_weight(c.rng, {N, K}, dtype);
    for (int64_t T : kLinearRowCounts) {
      const Tensor x = normal(c.rng, {T, K});
      const std::vector<double> bound = linear_bound(x, w, dtype);
      auto run = [&](Backend& be, int64_t begin, int64_t end) { return run_linear(be, x, w, begin, end); };
      judge_per_row(c,
                    "linear " + std::string(dtype_name(dtype)) + " T=" + std::to_string(T) + " K=" + std::to_string(K) +
                        " N=" + std::to_string(N),
                    T, bound, run);
    }
  }
}

// No launch heuristic may change a row's bits: at each T, every variant that can take T rows (cuda::linear_variants:
// each streaming and tiled shape, the register-ring kernel at 1 to 4 warps a block, the shared-memory ring kernel
// where the rows fit it, each streaming one with K whole, split in two and split by slice) must give the bytes of the
// launch production chooses, which must be within linear's bound. The weights are the model's projections scaled down,
// each awkward: N = 1030 x K = 264 (8192 x 2048: K a multiple of 8, not of 32), 258 x 1030 (2048 x 4096: K not a
// multiple of 8, so no 16-byte loads), 130 x 2048, 33 x 77 and 1 x 40; no N a multiple of 16. A forced variant that
// cannot take the rows must be refused. dtype BF16 or FP8 (264 is no multiple of 16, so FP8 loads it byte by byte).
void linear_variants_case(Context& c, DType dtype) {
  for (auto [N, k] : {std::pair<int64_t, int64_t>{1030, 264}, {258, 1030}, {130, 2048}, {33, 77}, {1, 40}}) {
    const int64_t K = whole_groups(k, dtype);
    const Weight w = random_weight(c.rng, {N, K}, dtype);
    for (int64_t T : {int64_t{1}, int64_t{13}, int64_t{64}, int64_t{65}, int64_t{200}}) {
      const Tensor x = normal(c.rng, {T, K});
      const std::string what = "linear " + std::string(dtype_name(dtype)) + " variants T=" + std::to_string(T) +
                               " K=" + std::to_string(K) + " N=" + std::to_string(N);
      const Tensor chosen = run_linear(c.gpu, x, w, 0, T);
      c.verdict.close(what + " as chosen", chosen, run_linear(c.cpu, x, w, 0, T), linear_bound(x, w, dtype));
      for (const cuda::LinearVariant& v : cuda::linear_variants(linear_weights(dtype), T)) {
        const LinearVariantScope scope(c.gpu, v);
        c.verdict.same_bits(what + " " + linear_variant_label(v) + " vs as chosen", run_linear(c.gpu, x, w, 0, T),
                            chosen);
      }
    }
  }
  const Weight w = random_weight(c.rng, {33, whole_groups(77, dtype)}, dtype);
  const Tensor x = normal(c.rng, {13, whole_groups(77, dtype)});
  const LinearVariantScope scope(c.gpu, {cuda::LinearShape::kStream8, cuda::LinearStreamKernel::kSharedRing, 0});
  try {
    run_linear(c.gpu, x, w, 0, 13);
    c.verdict.fail("linear: the shared-memory ring kernel of stream8 forced onto 13 rows ran instead of being refused");
  } catch (const Error&) {
  }
}

// linear_parts over a stack of weights (one stored matrix, each part a view of its rows) must give each part the
// bytes linear gives it alone, at every row count and under every launch variant (each kernel's store into parts and
// the split products' fold into them), and be within linear's bound of the CPU reference. Part widths are awkward
// (37, 130, 5 and 1: no boundary on a 16-feature tile's edge); parts that are not adjacent in memory take one product
// each. dtype BF16, FP8 or F32.
void linear_parts_case(Context& c, DType dtype) {
  const int64_t widths[] = {37, 130, 5, 1};
  for (const int64_t k : {int64_t{77}, int64_t{1030}}) {
    const int64_t K = whole_groups(k, dtype);
    int64_t N = 0;
    for (int64_t width : widths) N += width;
    const Weight stacked = random_weight(c.rng, {N, K}, dtype);
    for (int64_t T : kLinearRowCounts) {
      const Tensor x = normal(c.rng, {T, K});
      const std::string what =
          "linear_parts " + std::string(dtype_name(dtype)) + " T=" + std::to_string(T) + " K=" + std::to_string(K);
      // Each part alone through linear, on the GPU and the CPU.
      std::vector<Tensor> alone, reference;
      std::vector<Weight> parts;
      for (int64_t row = 0; const int64_t width : widths) {
        parts.push_back({clone(stacked.stored.rows(row, row + width)), clone(stacked.values.rows(row, row + width))});
        alone.push_back(run_linear(c.gpu, x, parts.back(), 0, T));
        reference.push_back(run_linear(c.cpu, x, parts.back(), 0, T));
        row += width;
      }
      // All parts in one call: views of one stored stack (one product), or separate uploads (one product each).
      auto run_parts = [&](bool one_stack) {
        const Tensor device_x = c.gpu.upload(x);
        const Tensor device_stack = c.gpu.upload(stacked.stored);
        std::vector<Tensor> ws, ys;
        for (int64_t row = 0; const int64_t width : widths) {
          ws.push_back(one_stack ? device_stack.rows(row, row + width) : c.gpu.upload(parts[ws.size()].stored));
          ys.push_back(poisoned(c.gpu, DType::kF32, {T, width}));
          row += width;
        }
        std::vector<const Tensor*> w_ptrs;
        std::vector<Tensor*> y_ptrs;
        for (size_t j = 0; j < ws.size(); ++j) w_ptrs.push_back(&ws[j]), y_ptrs.push_back(&ys[j]);
        c.gpu.linear_parts(device_x, w_ptrs, y_ptrs);
        std::vector<Tensor> out;
        for (const Tensor& y : ys) out.push_back(fetch_f32(c.gpu, y));
        return out;
      };
      const auto judge = [&](const std::string& how, const std::vector<Tensor>& got) {
        for (size_t j = 0; j < got.size(); ++j) {
          const std::string part = what + " part " + std::to_string(j) + " " + how;
          c.verdict.same_bits(part + " vs linear alone", got[j], alone[j]);
          c.verdict.close(part, got[j], reference[j], linear_bound(x, parts[j], dtype));
        }
      };
      judge("stacked", run_parts(true));
      judge("separate", run_parts(false));
      if (dtype == DType::kF32 || T > 65) continue;
      for (const cuda::LinearVariant& v : cuda::linear_variants(linear_weights(dtype), T)) {
        const LinearVariantScope scope(c.gpu, v);
        judge("stacked " + linear_variant_label(v), run_parts(true));
      }
    }
  }
}

// linear with BF16 weights that each select one input column, w[n, k] = 1 for k = perm(n) and 0 otherwise: every
// product but one is an exact zero, so y[t, n] is exactly the BF16 operand the GPU made of x[t, perm(n)], and must be
// x[t, perm(n)] rounded to nearest even, bit for bit. linear_bf16's bound (2^-8 of Σ|x·w|) would also pass a
// truncating conversion: its errors, within 2^-7 of each operand and of random sign after the product, stay far below
// the bound. A quarter of x are exact ties (low 16 bits 0x8000) of either parity. T >= 17 stages the activations
// through the conversion kernel (K = 136: four at a time, K = 45: one by one), T <= 16 rounds them into the fragments.
void linear_operand_rounding_case(Context& c) {
  for (int64_t K : {int64_t{136}, int64_t{45}}) {
    std::vector<int64_t> perm(static_cast<size_t>(K));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), c.rng);
    Tensor select = Tensor::zeros(DType::kF32, {K, K});
    for (int64_t n = 0; n < K; ++n) select.f32()[n * K + perm[n]] = 1.0f;
    const Tensor w = to_dtype(select, DType::kBF16);
    for (int64_t T : kLinearRowCounts) {
      Tensor x = normal(c.rng, {T, K});
      for (int64_t i = 0; i < T * K; i += 4) {
        uint32_t bits;
        std::memcpy(&bits, x.f32() + i, sizeof bits);
        bits = (bits & 0xffff0000u) | 0x8000u;
        std::memcpy(x.f32() + i, &bits, sizeof bits);
      }
      const Tensor rounded = bf16_exact(x);
      Tensor want = Tensor::zeros(DType::kF32, {T, K});
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < K; ++n) want.f32()[t * K + n] = rounded.f32()[t * K + perm[n]];
      auto run = [&](int64_t begin, int64_t end) {
        Tensor y = poisoned(c.gpu, DType::kF32, {end - begin, K});
        c.gpu.linear(c.gpu.upload(x.rows(begin, end)), c.gpu.upload(w), y);
        return fetch_f32(c.gpu, y);
      };
      const std::string what = "linear BF16 operand rounding T=" + std::to_string(T) + " K=" + std::to_string(K);
      const Tensor got = run(0, T);
      c.verdict.same_bits(what, got, want);
      check_rows_alone(c.verdict, what, got, run);
    }
  }
}

// linear with a device weight w [N, K] whose row n selects input column column[n] with value[n] (every other entry
// 0, multipliers 1): y[t, n] = value[n] · BF16(x[t, column[n]]) exactly, which production's launch and every variant
// of the weight type must give bit for bit, at row counts of every streaming shape and a tiled one.
void expect_selected_columns(Context& c, const std::string& what, const Tensor& w, cuda::LinearWeights type,
                             const std::vector<float>& value, const std::vector<int64_t>& column) {
  const int64_t N = w.dim(0), K = w.dim(1);
  for (int64_t T : {int64_t{1}, int64_t{13}, int64_t{64}, int64_t{65}}) {
    const Tensor x = normal(c.rng, {T, K});
    const Tensor rounded = bf16_exact(x);
    Tensor want = Tensor::zeros(DType::kF32, {T, N});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) want.f32()[t * N + n] = value[n] * rounded.f32()[t * K + column[n]];
    const Tensor device_x = c.gpu.upload(x);
    auto run = [&] {
      Tensor y = poisoned(c.gpu, DType::kF32, {T, N});
      c.gpu.linear(device_x, w, y);
      return fetch_f32(c.gpu, y);
    };
    const std::string label = what + " T=" + std::to_string(T);
    c.verdict.same_bits(label + " as chosen", run(), want);
    for (const cuda::LinearVariant& v : cuda::linear_variants(type, T)) {
      const LinearVariantScope scope(c.gpu, v);
      c.verdict.same_bits(label + " " + linear_variant_label(v), run(), want);
    }
  }
}

// linear with FP8 weights that each select one input column with one code, w[n, k] = code_n for k = perm(n) and 0
// otherwise, multipliers 1: y[t, n] is exactly code_n · BF16(x[t, perm(n)]) (a 4-bit by 8-bit product, exact in F32),
// so every launch variant must give it bit for bit. The rows hold every nonzero finite code (252 of them), so a code
// the kernels widen wrongly (a subnormal flushed, a sign or exponent bit misplaced) fails here, where a bound over
// Σ|x·w| could hide it. K = 300 puts the selected columns in all three slices.
void linear_fp8_codes_case(Context& c) {
  std::vector<uint8_t> codes;
  for (int code = 1; code < 256; ++code)
    if ((code & 0x7f) != 0 && (code & 0x7f) != 0x7f) codes.push_back(static_cast<uint8_t>(code));
  const auto N = static_cast<int64_t>(codes.size());
  const int64_t K = 300;
  std::vector<int64_t> perm(static_cast<size_t>(K));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), c.rng);
  Tensor bytes = Tensor::zeros(DType::kF8E4M3, {N, K});
  for (int64_t n = 0; n < N; ++n) bytes.data_as<uint8_t>()[n * K + perm[n]] = codes[n];
  Tensor scales = Tensor::zeros(DType::kF32, Tensor::block_scales_shape({N, K}));
  for (int64_t i = 0; i < scales.numel(); ++i) scales.f32()[i] = 1.0f;
  const Tensor w = c.gpu.upload(bytes.with_block_scales(scales));
  std::vector<float> value;
  for (const uint8_t code : codes) value.push_back(fp8_e4m3_to_f32(code));
  expect_selected_columns(c, "linear FP8 codes", w, cuda::LinearWeights::kFp8, value, perm);
}

// linear with NVFP4 weights that each select one input column with one code and one group scale, w[n, k] =
// e2m1(c_n) · e4m3(s_n) for k = perm(n) and 0 otherwise, weight scales 1: y[t, n] is exactly that value times
// BF16(x[t, perm(n)]) (at most 6 by 8 significant bits), so every launch variant must give it bit for bit. The rows
// hold every nonzero code with every 5th positive E4M3 scale (subnormal ones included), so a code or scale the kernels
// widen wrongly fails here. K = 80 is five groups: the selected columns' groups are their own, the others' scales
// arbitrary.
void linear_nvfp4_codes_case(Context& c) {
  std::vector<std::pair<uint8_t, uint8_t>> picks;  // (code, scale)
  for (int code = 1; code < 16; ++code)
    for (int scale = 1; scale < 0x7f; scale += 5)
      if (code != 8) picks.emplace_back(static_cast<uint8_t>(code), static_cast<uint8_t>(scale));
  const auto N = static_cast<int64_t>(picks.size());
  const int64_t K = 80, groups = K / kNvfp4GroupK;
  std::uniform_int_distribution<int64_t> column(0, K - 1);
  std::uniform_int_distribution<int> any_scale(1, 0x7e);
  Tensor codes = Tensor::zeros(DType::kE2M1, {N, K});
  Tensor group_scales = Tensor::zeros(DType::kF8E4M3, {N, groups});
  std::vector<int64_t> selected(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t k = selected[n] = column(c.rng);
    codes.data_as<uint8_t>()[(n * K + k) / 2] = static_cast<uint8_t>(picks[n].first << (4 * (k % 2)));
    for (int64_t g = 0; g < groups; ++g)
      group_scales.data_as<uint8_t>()[n * groups + g] =
          g == k / kNvfp4GroupK ? picks[n].second : static_cast<uint8_t>(any_scale(c.rng));
  }
  const Tensor ones = Tensor::from_f32(std::vector<float>(static_cast<size_t>(N), 1.0f), {N, 1});
  const Tensor w = c.gpu.upload(codes.with_block_scales(ones).with_group_scales(group_scales));
  std::vector<float> value;
  for (const auto& [code, scale] : picks) value.push_back(e2m1_to_f32(code) * fp8_e4m3_to_f32(scale));
  expect_selected_columns(c, "linear NVFP4 codes", w, cuda::LinearWeights::kNvfp4, value, selected);
}

// Router logits on a grid of 1/4: exact ties are common (so the tie rule is exercised), and distinct logits are far
// enough apart that no rounding can reorder them, so the chosen ids must match the reference exactly. Expert counts
// below and above the block's 128 threads, the models' (256 experts, top 8; 512, top 10), every expert kept (300 of
// 300) and the most the kernel takes.
void moe_route_case(Context& c) {
  for (auto [E, top_k] : {std::pair<int64_t, int64_t>{7, 3},
                          {64, 8},
                          {100, 6},
                          {256, 8},
                          {512, 10},
                          {300, 300},
                          {cuda::kMaxRouteExperts, 4}}) {
    for (bool renormalize : {false, true}) {
      for (int64_t T : kRowCounts) {
        Tensor logits = normal(c.rng, {T, E}, 1.5f);
        for (int64_t i = 0; i < T * E; ++i) logits.f32()[i] = std::round(logits.f32()[i] * 4.0f) / 4.0f;
        auto run = [&](Backend& be, int64_t begin, int64_t end) {
          Tensor ids = poisoned(be, DType::kI32, {end - begin, top_k});
          Tensor weights = poisoned(be, DType::kF32, {end - begin, top_k});
          be.moe_route(be.upload(logits.rows(begin, end)), top_k, renormalize, ids, weights);
          return std::pair{be.download(ids), fetch_f32(be, weights)};
        };
        const std::string what = "moe_route E=" + std::to_string(E) + " top_k=" + std::to_string(top_k) +
                                 (renormalize ? " renormalized" : "") + " T=" + std::to_string(T);
        const auto [want_ids, want_w] = run(c.cpu, 0, T);
        const auto [got_ids, got_w] = run(c.gpu, 0, T);
        c.verdict.same_bits(what + " ids", got_ids, want_ids);
        // softmax: E exps and an E-term sum, then a division (and the kept sum and a division when renormalized),
        // on both backends.
        const double rel = 8 * kTranscendental + 2.0 * static_cast<double>(E + top_k + 8) * kF32Unit;
        std::vector<double> bound(static_cast<size_t>(T * top_k));
        for (int64_t i = 0; i < T * top_k; ++i) bound[i] = rel * std::fabs(want_w.f32()[i]);
        c.verdict.close(what + " weights", got_w, want_w, bound);
        check_rows_alone(c.verdict, what + " ids", got_ids,
                         [&](int64_t begin, int64_t end) { return run(c.gpu, begin, end).first; });
        check_rows_alone(c.verdict, what + " weights", got_w,
                         [&](int64_t begin, int64_t end) { return run(c.gpu, begin, end).second; });
      }
    }
  }
}

// The grouping's two kernels, one warp (up to 32 pairs) and one block, must give the same sorted rows, tiles and
// bad-id report for the same ids: production takes the warp for a decode step of a few tokens and the block for the
// rest, and the products after them read only these. Ids repeat (experts of several rows, split over tiles of 1, 3 or
// 8 rows) and some lie outside [0, E).
void moe_group_paths_case(Context& c) {
  for (int64_t E : {7, 256}) {
    for (int64_t top_k : {1, 3, 8}) {
      for (int64_t T = 1; T * top_k <= 32; T += T < 4 ? 1 : 3) {
        for (int32_t tile_rows : {1, 3, 8}) {
          const int64_t pairs = T * top_k, max_tiles = cuda::moe_max_tiles(pairs, E, tile_rows);
          Tensor ids = Tensor::zeros(DType::kI32, {pairs});
          // Few distinct experts, so that rows share them; one pair in five of the later ones out of range.
          std::uniform_int_distribution<int32_t> expert(0, static_cast<int32_t>(std::min<int64_t>(E, 5)) - 1);
          std::uniform_int_distribution<int> fifth(0, 4);
          for (int64_t i = 0; i < pairs; ++i) {
            int32_t id = expert(c.rng) * static_cast<int32_t>(E / 5 + 1) % static_cast<int32_t>(E);
            if (i > 2 && fifth(c.rng) == 0) id = i % 2 ? static_cast<int32_t>(E) : -3;
            ids.data_as<int32_t>()[i] = id;
          }
          const Tensor device_ids = c.gpu.upload(ids);
          auto group = [&](bool one_block) {
            Tensor rows = poisoned(c.gpu, DType::kI32, {2 * pairs});           // row_token, pair_row
            Tensor tiles = poisoned(c.gpu, DType::kI32, {3 * max_tiles + 1});  // tiles, num_tiles
            Tensor clear = Tensor::zeros(DType::kI32, {4});                    // a MoeIdReport with nothing reported
            const cuda::MoeIdReport nothing;
            static_assert(sizeof(nothing) == 4 * sizeof(int32_t));
            std::memcpy(clear.data(), &nothing, sizeof(nothing));
            Tensor report = c.gpu.upload(clear);
            cuda::MoeGroupParams p;
            p.expert_ids = device_ids.data_as<const int32_t>();
            p.report = static_cast<cuda::MoeIdReport*>(report.data());
            p.pairs = static_cast<int32_t>(pairs);
            p.top_k = static_cast<int32_t>(top_k);
            p.experts = static_cast<int32_t>(E);
            p.tile_rows = tile_rows;
            p.row_token = rows.data_as<int32_t>();
            p.pair_row = rows.data_as<int32_t>() + pairs;
            p.tiles = tiles.data_as<int32_t>();
            p.num_tiles = tiles.data_as<int32_t>() + 3 * max_tiles;
            p.one_block = one_block;
            cuda::launch_moe_group(p, cuda::KernelFault::kNone, c.gpu.stream());
            return std::vector<Tensor>{c.gpu.download(rows), c.gpu.download(tiles), c.gpu.download(report)};
          };
          const std::vector<Tensor> warp = group(false), block = group(true);
          const std::string what = "moe_group E=" + std::to_string(E) + " T=" + std::to_string(T) +
                                   " top_k=" + std::to_string(top_k) + " tile_rows=" + std::to_string(tile_rows);
          c.verdict.same_bits(what + " rows", warp[0], block[0]);
          c.verdict.same_bits(what + " tiles", warp[1], block[1]);
          c.verdict.same_bits(what + " report", warp[2], block[2]);
        }
      }
    }
  }
}

double silu(double z) {
  return z / (1.0 + std::exp(-z));
}

void moe_experts_case(Context& c, DType dtype) {
  const int64_t E = 7, top_k = 3, H = whole_groups(136, dtype), I = whole_groups(40, dtype);
  const Weight gate_up = random_weight(c.rng, {E, 2 * I, H}, dtype), down = random_weight(c.rng, {E, H, I}, dtype);
  for (int64_t T : kRowCounts) {
    const Tensor x = normal(c.rng, {T, H});
    // Distinct experts per token, weights a softmax share (positive, summing to at most 1), best first.
    Tensor ids = Tensor::zeros(DType::kI32, {T, top_k});
    Tensor weights = uniform(c.rng, {T, top_k}, 0.05f, 0.5f);
    std::vector<int32_t> order(E);
    for (int64_t t = 0; t < T; ++t) {
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), c.rng);
      std::sort(weights.f32() + t * top_k, weights.f32() + (t + 1) * top_k, std::greater<>());
      for (int64_t j = 0; j < top_k; ++j) ids.data_as<int32_t>()[t * top_k + j] = order[j];
    }
    ids.data_as<int32_t>()[0] = static_cast<int32_t>(E - 1);  // the last expert appears
    if (T * top_k > 1) ids.data_as<int32_t>()[1] = 0;

    // Bound per (t, n): the gate and up products' errors through SiLU(g)·u, the down product's own error (the
    // activation is its rounded operand), and the weighted sum over the token's experts.
    const float* gu = gate_up.values.f32();
    const float* dn = down.values.f32();
    std::vector<double> bound(static_cast<size_t>(T * H), 0.0), act(I), act_err(I);
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x.f32() + t * H;
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t e = ids.data_as<int32_t>()[t * top_k + j];
        const double omega = std::fabs(weights.f32()[t * top_k + j]);
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0, g_abs = 0, u_abs = 0;
          for (int64_t h = 0; h < H; ++h) {
            const double pg = xt[h] * static_cast<double>(gu[(e * 2 * I + i) * H + h]);
            const double pu = xt[h] * static_cast<double>(gu[(e * 2 * I + I + i) * H + h]);
            g += pg, u += pu, g_abs += std::fabs(pg), u_abs += std::fabs(pu);
          }
          const double dg = dot_bound(H, g_abs, dtype), du = dot_bound(H, u_abs, dtype);
          act[i] = silu(g) * u;
          // |SiLU'| ≤ 1.1; the SiLU and the product add a few roundings and one exp.
          act_err[i] = 1.1 * dg * (std::fabs(u) + du) + std::fabs(silu(g)) * du +
                       (4 * kF32Unit + 2 * kTranscendental) * std::fabs(act[i]);
        }
        for (int64_t n = 0; n < H; ++n) {
          double propagated = 0, abs_sum = 0;
          for (int64_t i = 0; i < I; ++i) {
            const double d = std::fabs(dn[(e * H + n) * I + i]);
            propagated += d * act_err[i];
            abs_sum += d * (std::fabs(act[i]) + act_err[i]);
          }
          // The weighted sum over top_k experts adds top_k + 2 roundings of at most Σ_j ω_j |down_j|, both sides.
          bound[t * H + n] +=
              omega * (propagated + dot_bound(I, abs_sum, dtype) + 2.0 * (top_k + 2) * kF32Unit * abs_sum);
        }
      }
    }
    auto run = [&](Backend& be, int64_t begin, int64_t end) {
      const ExpertWeights experts{be.upload(gate_up.stored), be.upload(down.stored)};
      Tensor y = poisoned(be, DType::kF32, {end - begin, H});
      be.moe_experts(be.upload(x.rows(begin, end)), be.upload(ids.rows(begin, end)),
                     be.upload(weights.rows(begin, end)), experts, y);
      return fetch_f32(be, y);
    };
    judge_per_row(c, "moe_experts " + std::string(dtype_name(dtype)) + " T=" + std::to_string(T), T, bound, run);
  }
}

// The grouped expert products likewise: every variant that can run a grouped product must give the MoE block the
// bytes of the launch production chooses. Its
// correctness against the reference is moe_experts_bf16's; this case holds the variants to each other. Both products
// reduce over at least three K-slices, the last one short (H = 3·128 + 8, I = 2·128 + 8), so that a split's fold in
// another order than slice order changes bits (two partial sums add the same either way round).
void moe_experts_variants_case(Context& c, DType dtype) {
  const int64_t E = 7, top_k = 3, H = whole_groups(392, dtype), I = whole_groups(264, dtype);
  const Weight gate_up = random_weight(c.rng, {E, 2 * I, H}, dtype);
  const Weight down = random_weight(c.rng, {E, H, I}, dtype);
  const ExpertWeights experts{c.gpu.upload(gate_up.stored), c.gpu.upload(down.stored)};
  for (int64_t T : {int64_t{1}, int64_t{13}, int64_t{64}, int64_t{65}, int64_t{200}}) {
    const Tensor x = c.gpu.upload(normal(c.rng, {T, H}));
    Tensor ids = Tensor::zeros(DType::kI32, {T, top_k});
    for (int64_t i = 0; i < T * top_k; ++i) ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * 5 + i / top_k) % E);
    const Tensor device_ids = c.gpu.upload(ids), weights = c.gpu.upload(uniform(c.rng, {T, top_k}, 0.05f, 0.5f));
    auto run = [&] {
      Tensor y = poisoned(c.gpu, DType::kF32, {T, H});
      c.gpu.moe_experts(x, device_ids, weights, experts, y);
      return fetch_f32(c.gpu, y);
    };
    const Tensor chosen = run();
    for (const cuda::LinearVariant& v :
         cuda::linear_variants(linear_weights(dtype), T * top_k, cuda::LinearRows::kGrouped)) {
      const LinearVariantScope scope(c.gpu, v);
      c.verdict.same_bits("moe_experts " + std::string(dtype_name(dtype)) + " variants T=" + std::to_string(T) + " " +
                              linear_variant_label(v) + " vs as chosen",
                          run(), chosen);
    }
  }
}

const CaseRegistrar reg_linear_f32("linear_f32", [](Context& c) { linear_case(c, DType::kF32); });
const CaseRegistrar reg_linear_bf16("linear_bf16", [](Context& c) { linear_case(c, DType::kBF16); });
const CaseRegistrar reg_linear_f16("linear_f16", [](Context& c) { linear_case(c, DType::kF16); });
const CaseRegistrar reg_linear_fp8("linear_fp8", [](Context& c) { linear_case(c, DType::kF8E4M3); });
const CaseRegistrar reg_linear_variants("linear_bf16_variants",
                                        [](Context& c) { linear_variants_case(c, DType::kBF16); });
const CaseRegistrar reg_linear_fp8_variants("linear_fp8_variants",
                                            [](Context& c) { linear_variants_case(c, DType::kF8E4M3); });
const CaseRegistrar reg_linear_fp8_codes("linear_fp8_codes", linear_fp8_codes_case);
const CaseRegistrar reg_linear_parts_fp8("linear_parts_fp8", [](Context& c) { linear_parts_case(c, DType::kF8E4M3); });
const CaseRegistrar reg_linear_parts_bf16("linear_parts_bf16", [](Context& c) { linear_parts_case(c, DType::kBF16); });
const CaseRegistrar reg_linear_parts_f32("linear_parts_f32", [](Context& c) { linear_parts_case(c, DType::kF32); });
const CaseRegistrar reg_linear_rounding("linear_bf16_operand_rounding", linear_operand_rounding_case);
const CaseRegistrar reg_route("moe_route", moe_route_case);
const CaseRegistrar reg_group_paths("moe_group_paths", moe_group_paths_case);
const CaseRegistrar reg_experts_bf16("moe_experts_bf16", [](Context& c) { moe_experts_case(c, DType::kBF16); });
const CaseRegistrar reg_experts_f32("moe_experts_f32", [](Context& c) { moe_experts_case(c, DType::kF32); });
const CaseRegistrar reg_experts_fp8("moe_experts_fp8", [](Context& c) { moe_experts_case(c, DType::kF8E4M3); });
const CaseRegistrar reg_experts_variants("moe_experts_bf16_variants",
                                         [](Context& c) { moe_experts_variants_case(c, DType::kBF16); });
const CaseRegistrar reg_experts_fp8_variants("moe_experts_fp8_variants",
                                             [](Context& c) { moe_experts_variants_case(c, DType::kF8E4M3); });
const CaseRegistrar reg_linear_nvfp4("linear_nvfp4", [](Context& c) { linear_case(c, DType::kE2M1); });
const CaseRegistrar reg_linear_nvfp4_variants("linear_nvfp4_variants",
                                              [](Context& c) { linear_variants_case(c, DType::kE2M1); });
const CaseRegistrar reg_linear_nvfp4_codes("linear_nvfp4_codes", linear_nvfp4_codes_case);
const CaseRegistrar reg_linear_parts_nvfp4("linear_parts_nvfp4",
                                           [](Context& c) { linear_parts_case(c, DType::kE2M1); });
const CaseRegistrar reg_experts_nvfp4("moe_experts_nvfp4", [](Context& c) { moe_experts_case(c, DType::kE2M1); });
const CaseRegistrar reg_experts_nvfp4_variants("moe_experts_nvfp4_variants",
                                               [](Context& c) { moe_experts_variants_case(c, DType::kE2M1); });

const ControlRegistrar ctl_linear(cuda::KernelFault::kLinearDropsLastKTile, "linear_bf16");
const ControlRegistrar ctl_route(cuda::KernelFault::kRouteTiesToHigher, "moe_route");
const ControlRegistrar ctl_experts(cuda::KernelFault::kExpertsDropLastExpert, "moe_experts_bf16");
// The F32 kernel's variant of kLinearDropsLastKTile, and its own bug.
const ControlRegistrar ctl_linear_f32(cuda::KernelFault::kLinearDropsLastKTile, "linear_f32");
const ControlRegistrar ctl_linear_remainder(cuda::KernelFault::kLinearF32DropsKRemainder, "linear_f32");
// A later part's first feature unwritten: its poisoned NaN fails every stacked run, in every kernel.
const ControlRegistrar ctl_parts_bf16(cuda::KernelFault::kLinearPartsSkipBoundary, "linear_parts_bf16");
const ControlRegistrar ctl_parts_f32(cuda::KernelFault::kLinearPartsSkipBoundary, "linear_parts_f32");
const ControlRegistrar ctl_to_bf16(cuda::KernelFault::kLinearToBf16Truncates, "linear_bf16_operand_rounding");
// Truncating the staged activations changes the shapes that stage them (stream32, stream64, tiled) and not those that
// round in the fragments (stream8, stream16): the variants no longer agree.
const ControlRegistrar ctl_variants(cuda::KernelFault::kLinearToBf16Truncates, "linear_bf16_variants");
const ControlRegistrar ctl_experts_variants(cuda::KernelFault::kLinearToBf16Truncates, "moe_experts_bf16_variants");
// Activations in natural order: the warpgroup-MMA variant's steps sum other sets of 16 k than the contract's, so its
// bits differ from every other variant's (bench/linear/tensor_core_bits: 46 % of outputs).
const ControlRegistrar ctl_slots(cuda::KernelFault::kLinearSlotsNatural, "linear_bf16_variants");
const ControlRegistrar ctl_experts_slots(cuda::KernelFault::kLinearSlotsNatural, "moe_experts_bf16_variants");
// Production splits K of small grouped products too (choose_linear_k_split): a fold out of slice order or missing a
// slice makes the split launches disagree with the unsplit ones.
const ControlRegistrar ctl_experts_reversed(cuda::KernelFault::kLinearSplitFoldsReversed, "moe_experts_bf16_variants");
const ControlRegistrar ctl_experts_dropped(cuda::KernelFault::kLinearSplitDropsSlice, "moe_experts_bf16_variants");
const ControlRegistrar ctl_grouping(cuda::KernelFault::kExpertsGroupClampOffByOne, "moe_experts_f32");
const ControlRegistrar ctl_experts_silu(cuda::KernelFault::kExpertsSiluSigmoidOfUp, "moe_experts_bf16");
// A slice's partial sums times another slice's multipliers: out of bound wherever K has two slices or more (the
// products of K = 2048, the experts' H = 136).
const ControlRegistrar ctl_fp8_scale(cuda::KernelFault::kLinearFp8ScaleNextSlice, "linear_fp8");
const ControlRegistrar ctl_experts_fp8_scale(cuda::KernelFault::kLinearFp8ScaleNextSlice, "moe_experts_fp8");
// NVFP4 codes read from the wrong nibble, or a group's values times its neighbour's scale: out of bound for the random
// codes and scales of every case (each K holds two groups or more).
const ControlRegistrar ctl_nvfp4_nibbles(cuda::KernelFault::kLinearNvfp4NibblesSwapped, "linear_nvfp4");
const ControlRegistrar ctl_experts_nvfp4_nibbles(cuda::KernelFault::kLinearNvfp4NibblesSwapped, "moe_experts_nvfp4");
const ControlRegistrar ctl_nvfp4_scale(cuda::KernelFault::kLinearNvfp4ScaleNextGroup, "linear_nvfp4");
const ControlRegistrar ctl_experts_nvfp4_scale(cuda::KernelFault::kLinearNvfp4ScaleNextGroup, "moe_experts_nvfp4");

}  // namespace
}  // namespace plumb::harness
