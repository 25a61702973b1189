// What the arithmetic costs a quantized decode product's weight stream: one launch reads an [N, K] matrix in the
// streaming kernels' pattern (each warp 16 weight rows, lane (g, q) the 8 k at 32c + 8q of rows g and g + 8: 8 bytes
// of E4M3 codes, or 4 bytes of E2M1 codes and their group's E4M3 scale, as production's NVFP4 products load them; a
// ring of R such chunks in registers, K split over 1, 2 or 4 warps) and, per chunk and 8-row activation tile, does
//
//   read         nothing but read (the stream's ceiling, as stream_ceiling measures it for BF16)
//   widen+bf16   what the products do today: the codes widened to BF16 (FP8: ptx.cuh's e4m3x2_to_bf16x2, a byte
//                permute, a shift and mask, one BF16 multiply per pair; NVFP4: linear_common.cuh's nvfp4_to_bf16x4,
//                byte-permute tables and one BF16 multiply per pair) and two m16n8k16 BF16 MMA steps
//   e4m3 mma     FP8: one m16n8k32 E4M3 x E4M3 MMA step on the codes as loaded (what FP8 activations would allow)
//   bits+bf16    NVFP4: the same bits through bit moves and two BF16 multiplies per pair (nvfp4_bits_to_bf16x4
//                below, how the products first widened them), then the same two MMA steps
//
// with the activations' fragments held in registers, so that only the weights' side is measured; and beside them
// "product", the whole product as production launches it (launch_linear with its choice of kernel and split, F32
// activations of 1 or 16 rows, the weights' multipliers), timed the same way. One tile is a decode product of 1-8
// rows, two of 9-16. The gap between "widen+bf16" and "read" is what the widening and the MMA chain cost a stream of
// that size. Each figure is the best over the ring depths and splits of the median launch time as one of 32 launches
// replayed from a CUDA graph (what a phase of a step's graph sees), weights rotated through 256 MB so L2 never serves
// them, beside the copy bandwidth of the same run; NVFP4's bytes are its codes and group scales (the weight scales,
// 4 bytes a row, are left out). Usage: quantized_stream_arith fp8|nvfp4 [out.json]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/kernels/linear.h"
#include "backends/cuda/kernels/linear_common.cuh"
#include "production_params.h"
#include "weight_stream.cuh"

namespace {

using plumb::bench::check;
using plumb::bench::time_phases;

enum Arith : int { kRead, kWidenBf16, kOtherArith, kProduct, kArithCount };
const char* const kArithNames[2][kArithCount] = {{"read", "widen+bf16", "e4m3 mma", "product"},
                                                 {"read", "widen+bf16", "bits+bf16", "product"}};

// Eight E2M1 codes (element 2j in the low nibble of byte j) times their group's E4M3 scale as BF16 pairs, lower k in
// the low half: the bits of nvfp4_to_bf16x4 through bit moves, as the products first widened them. Each code's sign
// goes to a BF16 sign bit and its exponent and mantissa bits to the lowest exponent bits and the top mantissa bit,
// which is the BF16 value code · 2^-126 (E2M1's exponent bias is 1; its subnormal 0.5 lands on a BF16 subnormal); a
// multiply by 2^126 restores it and one by the scale applies that, both exact.
__device__ __forceinline__ uint4 nvfp4_bits_to_bf16x4(uint32_t codes, uint32_t scale_code) {
  const uint32_t scale = plumb::cuda::e4m3x2_to_bf16x2(scale_code * 0x0101u);
  uint32_t pair[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t b = (codes >> (8 * j)) & 0xffu;
    const uint32_t bits = ((b & 0x8u) << 12) | ((b & 0x7u) << 6) | ((b & 0x80u) << 24) | ((b & 0x70u) << 18);
    uint32_t value;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(value) : "r"(bits), "r"(0x7e807e80u));  // 2^126 in each half
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(pair[j]) : "r"(value), "r"(scale));
  }
  return make_uint4(pair[0], pair[1], pair[2], pair[3]);
}

// Lane's 8 codes of one row as four BF16 pairs (NVFP4: `v.y` its group's scale code).
template <bool kNvfp4, bool kBitMoves = false>
__device__ __forceinline__ uint4 widen(uint2 v) {
  using plumb::cuda::e4m3x2_to_bf16x2;
  if constexpr (kNvfp4 && kBitMoves) {
    return nvfp4_bits_to_bf16x4(v.x, v.y);
  } else if constexpr (kNvfp4) {
    return plumb::cuda::linear_detail::nvfp4_to_bf16x4(v.x, v.y);
  } else {
    return make_uint4(e4m3x2_to_bf16x2(v.x), e4m3x2_to_bf16x2(v.x >> 16), e4m3x2_to_bf16x2(v.y),
                      e4m3x2_to_bf16x2(v.y >> 16));
  }
}

// The lane's chunk c of one row: 8 E4M3 codes, or 4 bytes of E2M1 codes and their group's scale code.
template <bool kNvfp4>
__device__ __forceinline__ uint2 load_unit(const uint8_t* row, const uint8_t* row_scales, int c) {
  if constexpr (kNvfp4) {
    return make_uint2(plumb::cuda::load_streamed_4(row + 16 * c), __ldg(row_scales + 2 * c));
  } else {
    return plumb::cuda::load_streamed_8(row + 32 * c);
  }
}

// w: FP8 [n, k] codes; NVFP4 [n, k / 2] code bytes, then [n, k / 16] group scale codes. x: [kTiles · 4 · 32]
// activation fragment registers (arbitrary bits). What the warp computed reaches `sink` only under a condition that
// never holds, so neither a load nor an MMA is dead code.
template <bool kNvfp4, int kArith, int R, int kTiles>
__global__ void quantized_stream(const uint8_t* w, int n, int k, int split, const uint32_t* x, float* sink) {
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
  const int tile = warp / split, part = warp % split;
  if (tile * 16 >= n) return;
  const int k_len = k / split, chunks = k_len / 32;
  const int64_t row_bytes = kNvfp4 ? k / 2 : k, kk = part * k_len + 8 * q;
  const uint8_t* lo = w + (tile * 16 + g) * row_bytes + (kNvfp4 ? kk / 2 : kk);                // row g
  const uint8_t* hi = lo + 8 * row_bytes;                                                      // row g + 8
  const uint8_t* lo_scales = w + n * row_bytes + int64_t{tile * 16 + g} * (k / 16) + kk / 16;  // NVFP4 only
  const uint8_t* hi_scales = lo_scales + 8 * (k / 16);
  uint32_t xf[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) xf[t][i] = x[(t * 4 + i) * 32 + lane];
  uint2 ring[R][2];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    ring[i][0] = i < chunks ? load_unit<kNvfp4>(lo, lo_scales, i) : make_uint2(0, 0);
    ring[i][1] = i < chunks ? load_unit<kNvfp4>(hi, hi_scales, i) : make_uint2(0, 0);
  }
  float d[kTiles][4] = {};
  unsigned acc = 0;
  for (int c0 = 0; c0 < chunks; c0 += R) {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (c0 + i >= chunks) break;
      const uint2 a = ring[i][0], b = ring[i][1];
      if constexpr (kArith == kRead) {
        acc ^= a.x ^ b.y;
      } else if constexpr (kArith == kWidenBf16 || kNvfp4) {
        constexpr bool kBitMoves = kArith == kOtherArith;
        const uint4 wl = widen<kNvfp4, kBitMoves>(a), wh = widen<kNvfp4, kBitMoves>(b);
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          plumb::cuda::mma_bf16_16816(d[t], wl.x, wh.x, wl.y, wh.y, xf[t][0], xf[t][1]);
          plumb::cuda::mma_bf16_16816(d[t], wl.z, wh.z, wl.w, wh.w, xf[t][2], xf[t][3]);
        }
      } else {
#pragma unroll
        for (int t = 0; t < kTiles; ++t) plumb::cuda::mma_e4m3_16832(d[t], a.x, b.x, a.y, b.y, xf[t][0], xf[t][1]);
      }
      const int c = c0 + i + R;
      if (c < chunks) {
        ring[i][0] = load_unit<kNvfp4>(lo, lo_scales, c);
        ring[i][1] = load_unit<kNvfp4>(hi, hi_scales, c);
      }
    }
  }
  float total = static_cast<float>(acc);
#pragma unroll
  for (int t = 0; t < kTiles; ++t) total += d[t][0] + d[t][1] + d[t][2] + d[t][3];
  if (acc == 0x9E3779B9u || total == 1.2345e-30f) *sink = total;
}

using Kernel = void (*)(const uint8_t*, int, int, int, const uint32_t*, float*);

constexpr int kRingDepths[2] = {12, 24};

template <bool kNvfp4, int kArith>
Kernel kernel_with(int tiles, int ring) {
  if (tiles == 1) return ring == 12 ? quantized_stream<kNvfp4, kArith, 12, 1> : quantized_stream<kNvfp4, kArith, 24, 1>;
  return ring == 12 ? quantized_stream<kNvfp4, kArith, 12, 2> : quantized_stream<kNvfp4, kArith, 24, 2>;
}
template <bool kNvfp4>
Kernel kernel_for(int arith, int tiles, int ring) {
  if (arith == kRead) return kernel_with<kNvfp4, kRead>(tiles, ring);
  if (arith == kWidenBf16) return kernel_with<kNvfp4, kWidenBf16>(tiles, ring);
  return kernel_with<kNvfp4, kOtherArith>(tiles, ring);
}

struct Result {
  int n, k, tiles, arith;
  std::string how;
  double phase_us;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string format = argc >= 2 ? argv[1] : "";
  if (argc < 2 || argc > 3 || (format != "fp8" && format != "nvfp4") || (argc == 3 && argv[2][0] == '-')) {
    std::fprintf(stderr,
                 "quantized_stream_arith: unexpected arguments (usage: quantized_stream_arith fp8|nvfp4 "
                 "[out.json])\n");
    return 1;
  }
  const bool nvfp4 = format == "nvfp4";
  float* sink = nullptr;
  uint32_t* x = nullptr;
  check(cudaMalloc(&sink, sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&x, 2 * 4 * 32 * sizeof(uint32_t)), "cudaMalloc");
  plumb::bench::fill_pattern<<<1, 256>>>(reinterpret_cast<uint16_t*>(x), 2 * 4 * 32 * 2);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const double copy = plumb::bench::copy_gbps();
  std::printf("device-to-device copy: %.1f GB/s (1 GiB, median of 10)\n", copy);
  const plumb::cuda::DeviceLimits& device = plumb::cuda::device_limits();
  // The product's activations [16, K] F32 and outputs [16, N], sized for the largest shape; its multipliers (FP8 one
  // per feature and 128-wide slice, NVFP4 one per feature; all 2^-8: their values change no timing) and a split
  // product's buffers.
  constexpr int kMaxN = 16384, kMaxK = 4096;
  float *x_rows = nullptr, *y = nullptr, *scales = nullptr, *partials = nullptr;
  int32_t* arrivals = nullptr;
  check(cudaMalloc(&x_rows, sizeof(float) * 16 * kMaxK), "cudaMalloc");
  check(cudaMemset(x_rows, 0, sizeof(float) * 16 * kMaxK), "cudaMemset");
  check(cudaMalloc(&y, sizeof(float) * 16 * kMaxN), "cudaMalloc");
  const std::vector<float> scale_values(size_t{kMaxN} * (kMaxK / 128), 1.0f / 256);
  check(cudaMalloc(&scales, sizeof(float) * scale_values.size()), "cudaMalloc");
  check(cudaMemcpy(scales, scale_values.data(), sizeof(float) * scale_values.size(), cudaMemcpyHostToDevice), "upload");
  check(cudaMalloc(&partials, sizeof(float) * 16 * kMaxN * (kMaxK / 128)), "cudaMalloc");
  check(cudaMalloc(&arrivals, sizeof(int32_t) << 20), "cudaMalloc");
  check(cudaMemset(arrivals, 0, sizeof(int32_t) << 20), "cudaMemset");
  const auto print = [&](const Result& r, int64_t bytes) {
    const double pct = 100.0 * static_cast<double>(bytes) / (r.phase_us * 1e-6) / 1e9 / copy;
    std::printf(" %-12s %6.2f %5.1f%% ", r.how.c_str(), r.phase_us, pct);
  };
  std::printf("%s weights\n%8s %6s %6s %5s | %-26s %-26s %-26s %-26s\n", format.c_str(), "N", "K", "MB", "rows",
              "read: (R,split) us %copy", "widen+bf16", kArithNames[nvfp4][kOtherArith], "product: shape,split");
  // The FP8 decode products of the two models (35B: GDN qkv|z 12288 x 2048, 8192 x 2048, out 2048 x 4096, an
  // expert's gate_up 1024 x 2048 and down 2048 x 512, eight of each (a B=1 step's routed experts); 80B: GDN qkv|z
  // 16384 x 2048, eight of its 512 x 2048 experts' gate_up).
  const int sizes[][2] = {{12288, 2048}, {16384, 2048}, {8192, 2048}, {2048, 4096},
                          {1024, 2048},  {2048, 512},   {16384, 512}};
  std::vector<Result> results;
  for (const auto& size : sizes) {
    const int n = size[0], k = size[1];
    // FP8: the codes; NVFP4: the code bytes and the group scales.
    const int64_t bytes = nvfp4 ? int64_t{n} * k / 2 + int64_t{n} * k / 16 : int64_t{n} * k;
    const int copies_count = static_cast<int>(std::max<int64_t>(2, ((int64_t{256} << 20) + bytes - 1) / bytes));
    std::vector<uint8_t*> copies(copies_count);
    for (uint8_t*& c : copies) {
      check(cudaMalloc(&c, bytes), "cudaMalloc");
      plumb::bench::fill_pattern<<<1024, 256>>>(reinterpret_cast<uint16_t*>(c), bytes / 2);
    }
    check(cudaDeviceSynchronize(), "fill");
    for (int tiles = 1; tiles <= 2; ++tiles) {
      std::printf("%8d %6d %6.1f %5s |", n, k, bytes / 1e6, tiles == 1 ? "1" : "16");
      for (int arith = 0; arith < kArithCount; ++arith) {
        Result best{n, k, tiles, arith, "", 1e30};
        if (arith == kProduct) {
          const int rows = tiles == 1 ? 1 : 16;
          plumb::cuda::LinearParams p = plumb::bench::production_linear_params(
              nvfp4 ? plumb::cuda::LinearWeights::kNvfp4 : plumb::cuda::LinearWeights::kFp8, rows, n, k, scales, y,
              partials, arrivals, device);
          p.x = x_rows;
          if (plumb::cuda::linear_partials_count(p) > int64_t{16} * kMaxN * (kMaxK / 128) ||
              plumb::cuda::linear_arrival_count(p) > (int64_t{1} << 20)) {
            std::fprintf(stderr, "quantized_stream_arith: the split buffers are too small for %d x %d\n", n, k);
            return 1;
          }
          best.how = std::string(plumb::cuda::linear_shape_name(p.shape)) + "," +
                     std::to_string(plumb::cuda::linear_k_split(k, p.k_split));
          best.phase_us = time_phases(
              [&](int i, cudaStream_t s) {
                p.w = copies[i % copies.size()];
                p.w_group_scales = nvfp4 ? copies[i % copies.size()] + int64_t{n} * k / 2 : nullptr;
                plumb::cuda::launch_linear(p, plumb::cuda::KernelFault::kNone, s);
              },
              stream);
          check(cudaGetLastError(), "launch_linear");
          print(best, bytes);
          results.push_back(best);
          continue;
        }
        for (int r = 0; r < 2; ++r) {
          for (const int split : {1, 2, 4}) {
            if (k / split < 32 * kRingDepths[r] / 2 || (k / split) % 32 != 0) continue;
            constexpr int kWarpsPerBlock = 4;
            const int blocks = (n / 16 * split + kWarpsPerBlock - 1) / kWarpsPerBlock;
            const Kernel kernel = nvfp4 ? kernel_for<true>(arith, tiles, kRingDepths[r])
                                        : kernel_for<false>(arith, tiles, kRingDepths[r]);
            const double us = time_phases(
                [&](int i, cudaStream_t s) {
                  kernel<<<blocks, 32 * kWarpsPerBlock, 0, s>>>(copies[i % copies.size()], n, k, split, x, sink);
                },
                stream);
            check(cudaGetLastError(), "quantized_stream");
            if (us < best.phase_us)
              best = {n, k, tiles, arith, "(" + std::to_string(kRingDepths[r]) + "," + std::to_string(split) + ")", us};
          }
        }
        print(best, bytes);
        results.push_back(best);
      }
      std::printf("\n");
    }
    for (uint8_t* c : copies) cudaFree(c);
  }
  for (void* buffer :
       {static_cast<void*>(sink), static_cast<void*>(x), static_cast<void*>(x_rows), static_cast<void*>(y),
        static_cast<void*>(scales), static_cast<void*>(partials), static_cast<void*>(arrivals)})
    cudaFree(buffer);
  if (argc > 2) {
    FILE* out = std::fopen(argv[2], "w");
    if (out == nullptr) {
      std::fprintf(stderr, "quantized_stream_arith: cannot write %s\n", argv[2]);
      return 1;
    }
    std::fprintf(out,
                 "{\"benchmark\": \"quantized_stream_arith\", \"weights\": \"%s\", \"copy_gbps\": %.1f, "
                 "\"results\": [\n",
                 format.c_str(), copy);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(out,
                   "  {\"n\": %d, \"k\": %d, \"row_tiles\": %d, \"arith\": \"%s\", \"best\": \"%s\", \"phase_us\": "
                   "%.3f}%s\n",
                   r.n, r.k, r.tiles, kArithNames[nvfp4][r.arith], r.how.c_str(), r.phase_us,
                   i + 1 < results.size() ? "," : "");
    }
    std::fprintf(out, "]}\n");
    std::fclose(out);
  }
  return 0;
}
