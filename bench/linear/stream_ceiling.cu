// The ceiling of a decode product's weight stream: how fast one launch can merely read an [N, K] BF16 matrix, with no
// arithmetic, in the pattern the streaming kernels (kernels/linear_stream.cu) load it: each warp 16 weight rows, lane
// (g, q) 16 bytes of rows g and g + 8 at k = 32c + 8q, a ring of R such chunks in registers, K split over 1, 2 or 4
// warps. The best of these per size is what a product kernel of that size could reach in one launch, launch and
// ramp included, however good its arithmetic: the gap between a product's time and this one is the kernel's own; the
// gap between this one and the copy bandwidth belongs to launching a kernel of that size at all.
//
// Each figure is the median of 20 event-timed launches (after 5 untimed), rotating through copies of the matrix that
// fill 256 MB so L2 never serves them; the copy bandwidth (1 GiB device-to-device, median of 10) is measured in the
// same run. Usage: stream_ceiling [out.json]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "weight_stream.cuh"

namespace {

using plumb::bench::check;
using plumb::bench::median_ms;

// Every warp streams its rows with R chunks in flight; the XOR of what it read goes to `sink` only when it equals a
// value it never does, so no load is dead code.
template <int R>
__global__ void stream_rows(const uint16_t* w, int n, int k, int split, unsigned* sink) {
  const plumb::bench::WarpRows rows = plumb::bench::warp_rows(w, n, k, split);
  if (!rows.active) return;
  uint4 ring[R][2];
  plumb::bench::fill_ring(rows, ring);
  const unsigned acc = plumb::bench::drain_ring(rows, ring);
  if (acc == 0x9E3779B9u) *sink = acc;
}

using StreamKernel = void (*)(const uint16_t*, int, int, int, unsigned*);

// Median microseconds of one launch of `kernel` over the rotating copies.
float time_launches(StreamKernel kernel, const std::vector<uint16_t*>& copies, int n, int k, int split,
                    unsigned* sink) {
  constexpr int kWarpsPerBlock = 4;
  const int warps = n / 16 * split;
  const int blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const float ms = median_ms(
      5, 20, [&](int i) { kernel<<<blocks, 32 * kWarpsPerBlock>>>(copies[i % copies.size()], n, k, split, sink); });
  check(cudaGetLastError(), "stream_rows");
  return ms * 1e3f;
}

struct Row {
  int n, k, ring, split;
  double us, gbps;
};

}  // namespace

int main(int argc, char** argv) {
  unsigned* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc");
  const double copy = plumb::bench::copy_gbps();
  std::printf("device-to-device copy: %.1f GB/s (1 GiB, median of 10)\n", copy);
  std::printf("%8s %6s %8s %10s %9s %7s   %s\n", "N", "K", "MB", "best us", "GB/s", "%copy", "(ring, split)");
  // The decode products of the two models (35B: GDN qkv|z|b|a 12352, attention q|k|v 9216, 8192 x 2048, out 2048 x
  // 4096, experts 1024 x 2048 and 2048 x 512, the router stack's first 1280 of 1281 rows), and a 256 MiB matrix for
  // the steady state.
  const int sizes[][2] = {{12352, 2048}, {9216, 2048}, {8192, 2048}, {2048, 4096},
                          {1024, 2048},  {2048, 512},  {1280, 2048}, {65536, 2048}};
  const struct {
    int ring;
    StreamKernel kernel;
  } rings[] = {{12, stream_rows<12>}, {24, stream_rows<24>}};
  std::vector<Row> best_rows;
  for (const auto& size : sizes) {
    const int n = size[0], k = size[1];
    const int64_t count = int64_t{n} * k;
    const int64_t bytes = 2 * count;
    const int copies_count = static_cast<int>(std::max<int64_t>(2, ((int64_t{256} << 20) + bytes - 1) / bytes));
    std::vector<uint16_t*> copies(copies_count);
    for (uint16_t*& c : copies) {
      check(cudaMalloc(&c, bytes), "cudaMalloc");
      plumb::bench::fill_pattern<<<1024, 256>>>(c, count);
    }
    check(cudaDeviceSynchronize(), "fill");
    Row best{n, k, 0, 0, 1e30, 0};
    for (const auto& ring : rings) {
      for (const int split : {1, 2, 4}) {
        if (k / split < 32 * ring.ring / 2 || (k / split) % 32 != 0) continue;
        const double us = time_launches(ring.kernel, copies, n, k, split, sink);
        if (us < best.us) best = {n, k, ring.ring, split, us, static_cast<double>(bytes) / (us * 1e-6) / 1e9};
      }
    }
    for (uint16_t* c : copies) cudaFree(c);
    std::printf("%8d %6d %8.1f %10.2f %9.0f %6.1f%%   (%d, %d)\n", n, k, bytes / 1e6, best.us, best.gbps,
                100.0 * best.gbps / copy, best.ring, best.split);
    best_rows.push_back(best);
  }
  cudaFree(sink);
  if (argc > 1) {
    FILE* out = std::fopen(argv[1], "w");
    if (out == nullptr) {
      std::fprintf(stderr, "stream_ceiling: cannot write %s\n", argv[1]);
      return 1;
    }
    std::fprintf(out, "{\"benchmark\": \"stream_ceiling\", \"copy_gbps\": %.1f, \"results\": [\n", copy);
    for (size_t i = 0; i < best_rows.size(); ++i) {
      const Row& r = best_rows[i];
      std::fprintf(out, "  {\"n\": %d, \"k\": %d, \"ring\": %d, \"split\": %d, \"us\": %.3f, \"gbps\": %.1f}%s\n", r.n,
                   r.k, r.ring, r.split, r.us, r.gbps, i + 1 < best_rows.size() ? "," : "");
    }
    std::fprintf(out, "]}\n");
    std::fclose(out);
  }
  return 0;
}
