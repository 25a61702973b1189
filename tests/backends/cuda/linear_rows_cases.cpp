// Harness case of the fixed K-slice contract (kernels/linear.h): at every projection shape of Qwen3.5-35B-A3B and
// Qwen3-Next-80B-A3B, one row's output is byte-identical whether its product has 1, 13, 64, 65 or 4096 rows and
// whichever launch variant runs it: every streaming shape with the register ring at 1 to 4 warps and the shared-memory
// ring, each with K whole, split in two and split into a block per slice, and both tiled shapes. The same with FP8
// weights at the shapes FP8 checkpoints quantize (every one but the lm_heads; their variants have no shared-memory
// ring).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backends/cuda/kernels/linear.h"
#include "op_harness.h"

namespace plumb::harness {
namespace {

// xorshift64: random bits cheap enough for the lm_head's 0.5 G elements.
uint64_t next_bits(uint64_t& state) {
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return state;
}

// [N, K] BF16 weights of random sign and mantissa with magnitudes 2^-8 to 2^-6: cheap to make at the lm_head's 0.5 G
// elements, and every k contributes.
Tensor random_bf16_weight(std::mt19937_64& rng, int64_t n, int64_t k) {
  Tensor w = Tensor::zeros(DType::kBF16, {n, k});
  auto* bits = w.data_as<uint16_t>();
  uint64_t state = rng() | 1;
  for (int64_t i = 0; i < n * k; ++i) {
    const auto h = static_cast<uint32_t>(next_bits(state) >> 16);
    bits[i] = static_cast<uint16_t>((h & 0x807Fu) | ((119u + (h >> 8) % 3u) << 7));
  }
  return w;
}

// [N, K] FP8 weights: random codes (no NaN) and a random multiplier in [2^-10, 2^-8) per row and K-slice.
Tensor random_fp8_weight(std::mt19937_64& rng, int64_t n, int64_t k) {
  Tensor w = Tensor::zeros(DType::kF8E4M3, {n, k});
  auto* codes = w.data_as<uint8_t>();
  uint64_t state = rng() | 1;
  for (int64_t i = 0; i < n * k; ++i) {
    const auto code = static_cast<uint8_t>(next_bits(state) >> 24);
    codes[i] = (code & 0x7f) == 0x7f ? code ^ 1 : code;
  }
  Tensor scales = Tensor::zeros(DType::kF32, Tensor::block_scales_shape({n, k}));
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int64_t i = 0; i < scales.numel(); ++i) scales.f32()[i] = std::ldexp(1.0f + 3.0f * unit(rng), -10);
  return w.with_block_scales(scales);
}

void linear_row_counts_case(Context& c, DType dtype) {
  struct Projection {
    const char* name;
    int64_t n, k;
  };
  // Both models' projections (hidden 2048): GDN qkv, z, b and a, out; attention q (with its gate), k or v, o; the
  // router (256 and 512 experts), an expert's gate_up and down, the shared expert's gate; both lm_heads.
  const Projection projections[] = {
      {"gdn in_proj_qkv / attention q", 8192, 2048},
      {"gdn in_proj_z", 4096, 2048},
      {"gdn in_proj_b, in_proj_a", 32, 2048},
      {"gdn out_proj / attention o", 2048, 4096},
      {"attention k, v", 512, 2048},
      {"router (35B)", 256, 2048},
      {"router (80B)", 512, 2048},
      {"expert gate_up", 1024, 2048},
      {"expert down", 2048, 512},
      {"shared expert gate", 1, 2048},
      {"lm_head (80B)", 151936, 2048},
      {"lm_head (35B)", 248320, 2048},
  };
  for (const Projection& proj : projections) {
    const bool lm_head = proj.n > 100000;
    if (lm_head && dtype == DType::kF8E4M3) continue;
    const Tensor w = c.gpu.upload(dtype == DType::kF8E4M3 ? random_fp8_weight(c.rng, proj.n, proj.k)
                                                          : random_bf16_weight(c.rng, proj.n, proj.k));
    const Tensor probe = normal(c.rng, {1, proj.k});
    Tensor alone;  // [1, n]: the probe row's product computed alone, as chosen
    // 4096 rows of an lm_head would be a 4-GB output: its row counts stop at 65.
    for (int64_t T : {int64_t{1}, int64_t{13}, int64_t{64}, int64_t{65}, int64_t{4096}}) {
      if (lm_head && T > 65) continue;
      Tensor x = normal(c.rng, {T, proj.k});
      const int64_t at = std::min<int64_t>(T - 1, 37);
      std::memcpy(x.f32() + at * proj.k, probe.f32(), static_cast<size_t>(proj.k) * sizeof(float));
      const Tensor device_x = c.gpu.upload(x);
      auto probe_row = [&] {
        Tensor y = poisoned(c.gpu, DType::kF32, {T, proj.n});
        c.gpu.linear(device_x, w, y);
        return fetch_f32(c.gpu, y.rows(at, at + 1));
      };
      const std::string what = "linear rows " + std::string(dtype_name(dtype)) + " " + proj.name + " [" +
                               std::to_string(proj.n) + ", " + std::to_string(proj.k) + "] T=" + std::to_string(T);
      const Tensor chosen = probe_row();
      if (T == 1) alone = chosen;
      c.verdict.same_bits(what + " as chosen vs T=1", chosen, alone);
      // The lm_head's variants at one row count: each is 0.5-1 GB of weights a launch.
      if (lm_head && T != 13) continue;
      const auto type = dtype == DType::kF8E4M3 ? cuda::LinearWeights::kFp8 : cuda::LinearWeights::kBF16;
      for (const cuda::LinearVariant& v : cuda::linear_variants(type, T)) {
        const LinearVariantScope scope(c.gpu, v);
        c.verdict.same_bits(what + " " + linear_variant_label(v) + " vs T=1", probe_row(), alone);
      }
    }
  }
}

const CaseRegistrar reg_row_counts("linear_bf16_row_counts",
                                   [](Context& c) { linear_row_counts_case(c, DType::kBF16); });
const CaseRegistrar reg_row_counts_fp8("linear_fp8_row_counts",
                                       [](Context& c) { linear_row_counts_case(c, DType::kF8E4M3); });
// Either split fault changes every split variant's bits and none of the others'.
const ControlRegistrar ctl_reversed(cuda::KernelFault::kLinearSplitFoldsReversed, "linear_bf16_row_counts");
const ControlRegistrar ctl_variants_reversed(cuda::KernelFault::kLinearSplitFoldsReversed, "linear_bf16_variants");
// A slice left out: beyond linear's bound wherever a split runs (the variants' chosen launch is held to it).
const ControlRegistrar ctl_dropped(cuda::KernelFault::kLinearSplitDropsSlice, "linear_bf16");
const ControlRegistrar ctl_dropped_rows(cuda::KernelFault::kLinearSplitDropsSlice, "linear_bf16_row_counts");

}  // namespace
}  // namespace plumb::harness
