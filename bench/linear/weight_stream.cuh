// What the decode-product benchmarks share: error checks, event timing, a filled matrix, and the weight stream of the
// streaming kernels (kernels/linear_stream.cu) without their arithmetic: each warp reads 16 weight rows, lane (g, q)
// 16 bytes of rows g and g + 8 at k = 32c + 8q, through a ring of R such chunks held in registers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "backends/cuda/kernels/ptx.cuh"

namespace plumb::bench {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, cudaGetErrorString(status));
    std::exit(1);
  }
}

// A fixed pattern of arbitrary BF16 bits (the benchmarks only read them), so a matrix costs no host upload.
__global__ void fill_pattern(uint16_t* w, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    w[i] = static_cast<uint16_t>((i * 2654435761u) >> 16);
}

inline float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `runs` event-timed calls of work(i) on `stream` after `warmup` untimed ones.
template <class Work>
float median_ms(int warmup, int runs, Work work, cudaStream_t stream = nullptr) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times;
  for (int i = 0; i < warmup + runs; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    work(i);
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= warmup) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(times);
}

// The device-to-device copy bandwidth (GB/s, bytes read plus written; 1 GiB, median of 10 after 2): the rate every
// weight stream here is stated against.
inline double copy_gbps() {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, bytes), "cudaMalloc");
  check(cudaMalloc(&dst, bytes), "cudaMalloc");
  const float ms =
      median_ms(2, 10, [&](int) { check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy"); });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

// One launch over copy i (rotating) on `stream`.
using Launch = std::function<void(int i, cudaStream_t stream)>;

// Median microseconds of one event-timed launch.
inline float time_single(const Launch& launch, cudaStream_t stream) {
  const float ms = median_ms(
      5, 20, [&](int i) { launch(i, stream); }, stream);
  check(cudaGetLastError(), "stream launch");
  return ms * 1e3f;
}

// Median microseconds a launch adds as one of 32 back to back in a replayed CUDA graph: what a phase of a recorded
// step costs, the launch's own latency hidden behind the one before as in plumb's step graphs.
inline float time_phases(const Launch& launch, cudaStream_t stream) {
  constexpr int kPhases = 32;
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < kPhases; ++i) launch(i, stream);
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  const float ms = median_ms(
      2, 10, [&](int) { check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); }, stream);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms * 1e3f / kPhases;
}

// The rows one warp of the grid streams from an [n, k] matrix: warp w takes rows [16 (w / split), + 16) over its
// part w % split of k.
struct WarpRows {
  const uint16_t* lo = nullptr;  // row g, from k = part · k / split + 8q
  const uint16_t* hi = nullptr;  // row g + 8
  int chunks = 0;                // of 32 k
  bool active = false;           // a warp past the last row reads nothing
};

__device__ inline WarpRows warp_rows(const uint16_t* w, int n, int k, int split) {
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
  const int tile = warp / split, part = warp % split;
  const int k_len = k / split;
  WarpRows r;
  r.active = tile * 16 < n;
  if (!r.active) return r;
  r.lo = w + static_cast<int64_t>(tile * 16 + g) * k + part * k_len + 8 * q;
  r.hi = r.lo + 8 * static_cast<int64_t>(k);
  r.chunks = k_len / 32;
  return r;
}

// Loads the ring's first R chunks.
template <int R>
__device__ __forceinline__ void fill_ring(const WarpRows& r, uint4 (&ring)[R][2]) {
  using cuda::load_streamed;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    ring[i][0] = r.active && i < r.chunks ? load_streamed(r.lo + 32 * i) : make_uint4(0, 0, 0, 0);
    ring[i][1] = r.active && i < r.chunks ? load_streamed(r.hi + 32 * i) : make_uint4(0, 0, 0, 0);
  }
}

// Streams the rest of the warp's rows through the filled ring, each chunk's slot refilled as it is used; returns the
// XOR of what it read (a caller stores it only under a condition that never holds, so no load is dead code).
template <int R>
__device__ __forceinline__ unsigned drain_ring(const WarpRows& r, uint4 (&ring)[R][2]) {
  using cuda::load_streamed;
  unsigned acc = 0;
  if (!r.active) return acc;
  for (int c0 = 0; c0 < r.chunks; c0 += R) {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      acc ^= ring[i][0].x ^ ring[i][0].w ^ ring[i][1].x ^ ring[i][1].w;
      const int c = c0 + i + R;
      if (c < r.chunks) {
        ring[i][0] = load_streamed(r.lo + 32 * c);
        ring[i][1] = load_streamed(r.hi + 32 * c);
      }
    }
  }
  return acc;
}

}  // namespace plumb::bench
