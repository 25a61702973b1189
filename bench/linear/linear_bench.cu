// Benchmark of the linear kernels (kernels/linear.h) at the 35B model's decode and prefill sizes.
//
// For each (N, K) and T: BF16 weights [N, K] and F32 activations [T, K] of random finite values, the shape the
// backend would choose, and the median of 50 individually timed launches (events around each, all queued behind a
// spin kernel so no launch waits on the host). Weights smaller than kRotateBytes are copied until the copies fill it
// and the launches rotate through them, so L2 (50 MB) never serves weights. Activations are converted to BF16 once,
// outside the timing, for shapes that stage them so. Also checks that row r of a T-row product is bit-identical to
// the same activations computed alone (T = 1), and that the T = 1 row matches a double-precision reference. The
// device's copy bandwidth is measured in the same run (a 1 GiB device-to-device copy, median of 20), and every time is
// also stated as a fraction of its byte floor (the weights over that bandwidth). A second table times each decode
// product (T = 1 to 64) with K spread over 1, 2, 4, 8 and 16 blocks per tile, beside the split production chooses,
// and at T <= 16 also each streaming kernel pinned (the register ring, the shared-memory ring).
//
// --weights fp8: the same for F8_E4M3 weights (random finite codes, a random multiplier per feature and K-slice) at
// the sizes the FP8 checkpoints quantize (no lm_head, no router); the floor counts their bytes, codes and multipliers.
// --weights nvfp4: the same for NVFP4 weights (random E2M1 pairs, a random E4M3 scale per feature and 16 k, a random
// multiplier per feature); the floor counts codes, group scales and multipliers, and the group scales rotate with the
// codes.
//
// At T > 64 on a Hopper GPU both prefill kernel families run, production's first: the tiled mma.sync shape and the
// warpgroup-MMA one (held to the same bits).
//
// --shapes NxK,... and --rows T,...: only those products and row counts (T = 1 always runs: it is every other row
// count's reference), for a quick comparison of builds.
//
// Usage: linear_bench [--weights bf16|fp8|nvfp4] [--shapes NxK,...] [--rows T,...] [out.json]
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/kernels/launch_choices.h"
#include "backends/cuda/kernels/linear.h"
#include "list_flags.h"
#include "production_params.h"

namespace {

using plumb::cuda::KernelFault;
using plumb::cuda::LinearParams;
using plumb::cuda::LinearShape;
using plumb::cuda::LinearStreamKernel;
using plumb::cuda::LinearWeights;

constexpr size_t kRotateBytes = size_t{192} << 20;
constexpr int kWarmup = 5;
constexpr int kTimed = 50;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "linear_bench: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

__device__ uint32_t hash(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

// Random finite values: random sign and mantissa, exponents spanning 2^-8 .. 2^1.
__device__ uint32_t random_f32_bits(uint64_t i, uint32_t seed) {
  const uint32_t h = hash(i, seed);
  return (h & 0x807FFFFFu) | ((119u + (h >> 23) % 10u) << 23);
}

__global__ void init_bf16(uint16_t* w, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    w[i] = static_cast<uint16_t>(random_f32_bits(i, seed) >> 16);
}

__global__ void init_f32(float* x, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __uint_as_float(random_f32_bits(i, seed));
}

// Random finite E4M3 codes (0x7f and 0xff, the NaNs, become 0x7e and 0xfe).
__global__ void init_fp8(uint8_t* w, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t code = hash(i, seed) & 0xffu;
    w[i] = static_cast<uint8_t>((code & 0x7fu) == 0x7fu ? code - 1 : code);
  }
}

// Random multipliers in [2^-10, 2^-6): the size of a published checkpoint's weight_scale_inv.
__global__ void init_scales(float* s, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    s[i] = __uint_as_float((hash(i, seed) & 0x7FFFFFu) | ((117u + hash(i, seed + 1) % 4u) << 23));
}

// Random finite positive E4M3 group scales in [2^-3, 2^1) (exponent fields 4..7, the NaN code not among them).
__global__ void init_group_scales(uint8_t* s, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    s[i] = static_cast<uint8_t>((4u + hash(i, seed) % 4u) << 3 | (hash(i, seed + 1) & 7u));
}

// An E2M1 code's value (the low four bits: sign, two exponent bits, one mantissa bit).
__device__ double e2m1_value(uint32_t code) {
  const double magnitude[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return (code & 8u ? -1.0 : 1.0) * magnitude[code & 7u];
}

// Row `row` of x := row 0 of `src` (both [*, k]).
__global__ void copy_row(const float* src, float* x, int row, int k) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < k; i += gridDim.x * blockDim.x)
    x[int64_t{row} * k + i] = src[i];
}

// Reference for one product row: y[n] = sum_k bf16(x[k]) * w[n, k] in double (FP8: each code's value times its
// feature's multiplier for the code's K-slice; NVFP4: each E2M1 code's value times its group's E4M3 scale and its
// feature's multiplier), and sum |..| for the tolerance. w: BF16 bits, E4M3 codes with scales [n, slices], or E2M1
// pairs (low nibble first) with group scales [n, k / 16] and scales [n].
__global__ void reference_row(const void* w, const float* scales, const uint8_t* group_scales, const float* x, int n,
                              int k, double* y, double* magnitude) {
  const int f = blockIdx.x * blockDim.x + threadIdx.x;
  if (f >= n) return;
  const int slices = (k + plumb::cuda::kLinearSliceK - 1) / plumb::cuda::kLinearSliceK;
  double sum = 0, mag = 0;
  for (int i = 0; i < k; ++i) {
    const float xb = __bfloat162float(__float2bfloat16_rn(x[i]));
    const int64_t at = int64_t{f} * k + i;
    double wf;
    if (scales == nullptr) {
      wf = __uint_as_float(uint32_t{static_cast<const uint16_t*>(w)[at]} << 16);
    } else if (group_scales != nullptr) {
      const uint32_t pair = static_cast<const uint8_t*>(w)[at / 2];
      __nv_fp8_e4m3 group;
      group.__x = group_scales[at / 16];
      wf = e2m1_value(i % 2 ? pair >> 4 : pair) * double{static_cast<float>(group)} * scales[f];
    } else {
      __nv_fp8_e4m3 code;
      code.__x = static_cast<const uint8_t*>(w)[at];
      wf = double{static_cast<float>(code)} * scales[int64_t{f} * slices + i / plumb::cuda::kLinearSliceK];
    }
    sum += double{xb} * wf;
    mag += std::fabs(double{xb} * wf);
  }
  y[f] = sum;
  magnitude[f] = mag;
}

// Holds the stream for `ns` nanoseconds so that the launches queued behind it run back to back.
__global__ void spin(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

struct Result {
  int n, k, t;
  std::string shape, kernel;
  int k_split;
  double us, gbps, tflops;
  bool identical;
};

// Median of `count` timed runs of `launch(i)`, each between its own events, all queued behind a spin kernel.
template <class Launch>
double median_us(cudaStream_t stream, int count, Launch&& launch) {
  std::vector<cudaEvent_t> events(2 * count);
  for (auto& e : events) check(cudaEventCreate(&e), "cudaEventCreate");
  spin<<<1, 1, 0, stream>>>(20'000'000);
  for (int i = 0; i < count; ++i) {
    check(cudaEventRecord(events[2 * i], stream), "record");
    launch(i);
    check(cudaEventRecord(events[2 * i + 1], stream), "record");
  }
  check(cudaGetLastError(), "timed launches");
  check(cudaStreamSynchronize(stream), "timed runs");
  std::vector<float> ms(count);
  for (int i = 0; i < count; ++i) check(cudaEventElapsedTime(&ms[i], events[2 * i], events[2 * i + 1]), "elapsed");
  for (auto& e : events) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return 1e3 * (count % 2 ? ms[count / 2] : (ms[count / 2 - 1] + ms[count / 2]) / 2);
}

// Device-to-device copy bandwidth (bytes read + written over time), GB/s.
double copy_gbps(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc copy");
  check(cudaMalloc(&b, bytes), "cudaMalloc copy");
  const double us = median_us(
      stream, 20, [&](int) { check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy"); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (us * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  LinearWeights w_type = LinearWeights::kBF16;
  const char* json_path = nullptr;
  std::vector<std::vector<int>> sizes = {{32, 2048},   {12288, 2048},  {8192, 2048},  {4096, 2048},
                                         {2048, 4096}, {512, 2048},    {256, 2048},   {1024, 2048},
                                         {2048, 512},  {151936, 2048}, {248320, 2048}};
  std::vector<int> rows_list = {1, 4, 16, 32, 64, 4096};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--weights" && (value == "bf16" || value == "fp8" || value == "nvfp4")) {
      w_type = value == "fp8" ? LinearWeights::kFp8 : value == "nvfp4" ? LinearWeights::kNvfp4 : LinearWeights::kBF16;
      ++i;
    } else if (arg == "--shapes" || arg == "--rows") {
      std::vector<std::vector<int>> items;
      std::string error;
      if (!plumb::bench::parse_list_flag(value, arg.c_str(), arg == "--shapes", &items, &error)) {
        std::fprintf(stderr, "linear_bench: %s\n", error.c_str());
        return 1;
      }
      if (arg == "--shapes") {
        sizes = items;
      } else {
        rows_list = {1};  // every row count's reference
        for (const auto& item : items)
          if (item[0] != 1) rows_list.push_back(item[0]);
      }
      ++i;
    } else if (arg.rfind("--", 0) != 0 && json_path == nullptr) {
      json_path = argv[i];
    } else {
      std::fprintf(
          stderr,
          "linear_bench: unknown argument %s (usage: linear_bench [--weights bf16|fp8|nvfp4] [--shapes NxK,...] "
          "[--rows T,...] [out.json])\n",
          argv[i]);
      return 1;
    }
  }
  const bool fp8 = w_type == LinearWeights::kFp8;
  const bool nvfp4 = w_type == LinearWeights::kNvfp4;
  const bool quantized = fp8 || nvfp4;
  const char* weights_name = fp8 ? "fp8" : nvfp4 ? "nvfp4" : "bf16";
  const plumb::cuda::DeviceLimits& device = plumb::cuda::device_limits();
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");

  std::vector<Result> results;
  bool all_ok = true;
  const double copy = copy_gbps(stream);
  std::printf("device-to-device copy: %.1f GB/s (1 GiB, median of 20)\n", copy);
  // Split products' buffers, sized for the largest split any row of the tables runs.
  int32_t* arrivals = nullptr;
  float* partials = nullptr;
  const size_t partial_elems = size_t{64} << 20;
  check(cudaMalloc(&arrivals, sizeof(int32_t) << 20), "cudaMalloc arrivals");
  check(cudaMemset(arrivals, 0, sizeof(int32_t) << 20), "clear arrivals");
  check(cudaMalloc(&partials, sizeof(float) * partial_elems), "cudaMalloc partials");
  std::vector<Result> sweep;
  std::printf("%s weights\n%8s %6s %6s %-9s %-19s %5s %10s %9s %7s %8s  %s\n", weights_name, "N", "K", "T", "shape",
              "kernel", "split", "us", "GB/s", "%copy", "TFLOP/s", "bits vs T=1");

  for (const auto& size : sizes) {
    const int n = size[0], k = size[1];
    // FP8 and NVFP4 checkpoints keep the lm_head and the routers in BF16.
    if (quantized && (n < 64 || n > 100000)) continue;
    const int slices = plumb::cuda::linear_slices(k);
    const size_t features = static_cast<size_t>(n);
    const size_t code_bytes = features * k * (fp8 ? 2 : nvfp4 ? 1 : 4) / 2;
    const size_t group_bytes = nvfp4 ? features * k / 16 : 0;  // one E4M3 scale per feature and 16 k
    const size_t scale_count = fp8 ? features * slices : nvfp4 ? features : 0;
    const size_t w_bytes = code_bytes + group_bytes + sizeof(float) * scale_count;  // what a launch reads of weights
    const int copies =
        code_bytes < (size_t{200} << 20) ? std::max<int>(3, (kRotateBytes + code_bytes - 1) / code_bytes) : 1;
    char* w = nullptr;           // [copies, n, k] BF16 or E4M3; NVFP4: [copies, n, k / 2] E2M1 pairs
    uint8_t* gscales = nullptr;  // [copies, n, k / 16] E4M3, NVFP4 only
    float* scales = nullptr;     // FP8: [n, slices] F32; NVFP4: [n] F32
    check(cudaMalloc(&w, code_bytes * copies), "cudaMalloc w");
    if (nvfp4) check(cudaMalloc(&gscales, group_bytes * copies), "cudaMalloc group scales");
    // Every copy holds the same values, so each launch computes the same product.
    for (int c = 0; c < copies; ++c) {
      if (fp8) {
        init_fp8<<<1024, 256, 0, stream>>>(reinterpret_cast<uint8_t*>(w + c * code_bytes), int64_t{n} * k, 7);
      } else if (nvfp4) {
        // Any byte is two finite E2M1 codes.
        init_fp8<<<1024, 256, 0, stream>>>(reinterpret_cast<uint8_t*>(w + c * code_bytes), int64_t{n} * k / 2, 7);
        init_group_scales<<<1024, 256, 0, stream>>>(gscales + c * group_bytes, int64_t{n} * k / 16, 8);
      } else {
        init_bf16<<<1024, 256, 0, stream>>>(reinterpret_cast<uint16_t*>(w + c * code_bytes), int64_t{n} * k, 7);
      }
    }
    if (quantized) {
      check(cudaMalloc(&scales, sizeof(float) * scale_count), "cudaMalloc scales");
      init_scales<<<64, 256, 0, stream>>>(scales, static_cast<int64_t>(scale_count), 9);
    }
    check(cudaGetLastError(), "init w");

    // The T = 1 row, alone and against the reference.
    float* x1 = nullptr;  // [1, k]
    float* y1 = nullptr;  // [1, n]
    double *ref = nullptr, *mag = nullptr;
    check(cudaMalloc(&x1, sizeof(float) * k), "cudaMalloc x1");
    check(cudaMalloc(&y1, sizeof(float) * n), "cudaMalloc y1");
    check(cudaMalloc(&ref, sizeof(double) * n), "cudaMalloc ref");
    check(cudaMalloc(&mag, sizeof(double) * n), "cudaMalloc mag");
    init_f32<<<64, 256, 0, stream>>>(x1, k, 11);
    reference_row<<<(n + 127) / 128, 128, 0, stream>>>(w, scales, gscales, x1, n, k, ref, mag);
    std::vector<float> row1(n);
    std::vector<double> ref_host(n), mag_host(n);

    for (const int t : rows_list) {
      // [t, k] activations with the T = 1 row at index `probe`.
      const int probe = std::min(t - 1, 37);
      float* x = nullptr;          // [t, k] F32
      uint16_t* x_bf16 = nullptr;  // [t, linear_slot_order_k(k)] BF16, for shapes that stage activations so
      float* y = nullptr;          // [t, n]
      check(cudaMalloc(&x, sizeof(float) * t * k), "cudaMalloc x");
      check(cudaMalloc(&x_bf16, sizeof(uint16_t) * t * plumb::cuda::linear_slot_order_k(k)), "cudaMalloc x_bf16");
      check(cudaMalloc(&y, sizeof(float) * size_t(t) * n), "cudaMalloc y");
      init_f32<<<1024, 256, 0, stream>>>(x, int64_t{t} * k, 100 + t);
      copy_row<<<8, 256, 0, stream>>>(x1, x, probe, k);

      LinearParams p = plumb::bench::production_linear_params(w_type, t, n, k, scales, y, partials, arrivals, device);
      p.x = x;
      if (static_cast<size_t>(plumb::cuda::linear_partials_count(p)) > partial_elems) p.k_split = 1;
      // Activations as p.shape reads them (slot-ordered rows are linear_slot_order_k(k) long).
      auto stage_x = [&] {
        p.x = x;
        if (plumb::cuda::linear_stages_slot_order(p.shape)) {
          plumb::cuda::launch_linear_to_bf16_slots(x, x_bf16, t, k, plumb::cuda::KernelFault::kNone, stream);
          p.x = x_bf16;
        } else if (plumb::cuda::linear_stages_bf16(p.shape)) {
          plumb::cuda::launch_linear_to_bf16(x, x_bf16, int64_t{t} * k, plumb::cuda::KernelFault::kNone, stream);
          p.x = x_bf16;
        }
      };
      stage_x();
      auto launch = [&](int i) {
        p.w = w + (i % copies) * code_bytes;
        if (nvfp4) p.w_group_scales = gscales + (i % copies) * group_bytes;
        plumb::cuda::launch_linear(p, KernelFault::kNone, stream);
      };

      // Bit-identity of the probe row against T = 1 (whose own result is kept from the first pass).
      launch(0);
      check(cudaGetLastError(), "launch_linear");
      std::vector<float> probe_row(n);
      check(cudaMemcpyAsync(probe_row.data(), y + size_t(probe) * n, sizeof(float) * n, cudaMemcpyDeviceToHost, stream),
            "download");
      if (t == 1) {
        check(cudaMemcpyAsync(ref_host.data(), ref, sizeof(double) * n, cudaMemcpyDeviceToHost, stream), "download");
        check(cudaMemcpyAsync(mag_host.data(), mag, sizeof(double) * n, cudaMemcpyDeviceToHost, stream), "download");
      }
      check(cudaStreamSynchronize(stream), "first run");
      if (t == 1) {
        row1 = probe_row;
        double worst = 0;
        int bad = 0;
        for (int f = 0; f < n; ++f) {
          const double err = std::fabs(row1[f] - ref_host[f]) / (mag_host[f] + 1e-30);
          worst = std::max(worst, err);
          if (!(err <= 1e-3)) ++bad;
        }
        std::printf("N=%d K=%d: T=1 against the double reference: worst error %.2e of sum|x w|, %d bad -> %s\n", n, k,
                    worst, bad, bad == 0 ? "PASS" : "FAIL");
        all_ok = all_ok && bad == 0;
      }
      const bool identical = std::memcmp(probe_row.data(), row1.data(), sizeof(float) * n) == 0;
      all_ok = all_ok && identical;

      for (int i = 0; i < kWarmup; ++i) launch(i);
      auto report = [&](std::vector<Result>& into, bool same) {
        const double us = median_us(stream, kTimed, [&](int i) { launch(kWarmup + i); });
        const double gbps = w_bytes / (us * 1e3);
        const double tflops = 2.0 * t * n * k / (us * 1e6);
        const int split = plumb::cuda::linear_k_split(k, p.k_split);
        const char* kernel = plumb::cuda::linear_stream_kernel_name(p.stream_kernel);
        std::printf("%8d %6d %6d %-9s %-19s %5d %10.2f %9.1f %6.1f%% %8.2f  %s\n", n, k, t,
                    plumb::cuda::linear_shape_name(p.shape), kernel, split, us, gbps, 100.0 * gbps / copy, tflops,
                    same ? "PASS" : "FAIL");
        into.push_back({n, k, t, plumb::cuda::linear_shape_name(p.shape), kernel, split, us, gbps, tflops, same});
      };
      report(results, identical);
      // One launch of p as it is now: whether its probe row has the T = 1 row's bytes.
      auto probe_matches = [&] {
        launch(0);
        std::vector<float> row(n);
        check(cudaMemcpyAsync(row.data(), y + size_t(probe) * n, sizeof(float) * n, cudaMemcpyDeviceToHost, stream),
              "download");
        check(cudaStreamSynchronize(stream), "probe run");
        return std::memcmp(row.data(), row1.data(), sizeof(float) * n) == 0;
      };
      // NVFP4 runs on the streaming shapes alone (linear.h).
      if (t > 64 && plumb::cuda::linear_wgmma_runs() && !nvfp4) {
        // Beside it in the same call: the other prefill kernel family (tiled mma.sync or warpgroup MMA).
        p.shape = p.shape == LinearShape::kWgmma128 ? plumb::cuda::choose_linear_shape(w_type, t, t, n, false, device)
                                                    : LinearShape::kWgmma128;
        stage_x();
        const bool same = probe_matches();
        all_ok = all_ok && same;
        for (int i = 0; i < kWarmup; ++i) launch(i);
        report(results, same);
      }
      if (t <= 64 && n < 100000) {
        const int32_t chosen = p.k_split;
        for (const LinearStreamKernel kernel :
             {LinearStreamKernel::kByOccupancy, LinearStreamKernel::kRegisterRing, LinearStreamKernel::kSharedRing})
          for (int32_t split : {1, 2, 4, 8, 16}) {
            p.stream_kernel = kernel;
            p.k_split = split;
            if (plumb::cuda::linear_k_split(k, split) != split) continue;
            // The pinned kernels at T <= 16 only, where both can run.
            if (kernel != LinearStreamKernel::kByOccupancy &&
                (t > 16 || plumb::cuda::linear_launch_refusal(p) != nullptr))
              continue;
            // Each forced split's probe row must give the chosen launch's bytes too.
            const bool same = probe_matches();
            all_ok = all_ok && same;
            report(sweep, same);
          }
        p.stream_kernel = LinearStreamKernel::kByOccupancy;
        p.k_split = chosen;
      }
      cudaFree(x);
      cudaFree(x_bf16);
      cudaFree(y);
    }
    cudaFree(w);
    cudaFree(scales);
    cudaFree(gscales);
    cudaFree(x1);
    cudaFree(y1);
    cudaFree(ref);
    cudaFree(mag);
  }
  cudaFree(arrivals);
  cudaFree(partials);
  std::printf("%s\n", all_ok ? "ALL PASS" : "SOME FAIL");

  if (json_path != nullptr) {
    FILE* out = std::fopen(json_path, "w");
    if (out == nullptr) {
      std::fprintf(stderr, "linear_bench: cannot write %s\n", json_path);
      return 1;
    }
    std::fprintf(out, "{\"benchmark\": \"linear\", \"weights\": \"%s\", \"all_pass\": %s, \"copy_gbps\": %.1f",
                 weights_name, all_ok ? "true" : "false", copy);
    for (const auto* table : {&results, &sweep}) {
      std::fprintf(out, ", \"%s\": [\n", table == &results ? "results" : "split_sweep");
      for (size_t i = 0; i < table->size(); ++i) {
        const Result& r = (*table)[i];
        std::fprintf(out,
                     "  {\"n\": %d, \"k\": %d, \"t\": %d, \"shape\": \"%s\", \"kernel\": \"%s\", \"k_split\": %d, "
                     "\"us\": %.3f, \"weight_gbps\": %.1f, \"tflops\": %.3f, \"bit_identical\": %s}%s\n",
                     r.n, r.k, r.t, r.shape.c_str(), r.kernel.c_str(), r.k_split, r.us, r.gbps, r.tflops,
                     r.identical ? "true" : "false", i + 1 < table->size() ? "," : "");
      }
      std::fprintf(out, "]");
    }
    std::fprintf(out, "}\n");
    std::fclose(out);
  }
  return all_ok ? 0 : 2;
}
