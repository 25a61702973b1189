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
#include <string>
#include <vector>

#include "weight_stream.cuh"

namespace {

using plumb::bench::check;
using plumb::bench::Launch;
using plumb::bench::time_phases;
using plumb::bench::time_single;

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

// The other way in: bulk copies (cp.async.bulk, the copy engine of each multiprocessor) of kStageBytes into a ring of
// kStages shared-memory stages, each stage's arrival counted by an mbarrier. Block b streams bytes [b · bytes / G,
// (b + 1) · bytes / G) of the matrix (16-byte aligned) stage after stage; one thread issues, every thread reads each
// stage once it has landed (as a product's warps would read their fragments), and the stage is reissued after a
// barrier. No arithmetic: what this reaches is the ceiling of a product fed this way.
__device__ __forceinline__ void bulk_load(uint32_t dst, const char* src, uint32_t bytes, uint32_t barrier) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(barrier)
               : "memory");
}

__device__ __forceinline__ void bulk_wait(uint32_t barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n"
      "}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
}

template <int kStageBytes, int kStages>
__global__ void stream_bulk(const char* w, int64_t bytes, unsigned* sink) {
  extern __shared__ __align__(128) char stages[];  // [kStages][kStageBytes]
  __shared__ __align__(8) uint64_t full[kStages];
  const int64_t begin = bytes * blockIdx.x / gridDim.x / 16 * 16, end = bytes * (blockIdx.x + 1) / gridDim.x / 16 * 16;
  const int pieces = static_cast<int>((end - begin + kStageBytes - 1) / kStageBytes);
  const auto piece_bytes = [&](int i) {
    return static_cast<uint32_t>(min(int64_t{kStageBytes}, end - begin - int64_t{i} * kStageBytes));
  };
  const uint32_t stage0 = plumb::cuda::shared_address(stages), full0 = plumb::cuda::shared_address(full);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(full0 + 8 * s));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int i = 0; i < min(kStages, pieces); ++i)
      bulk_load(stage0 + i * kStageBytes, w + begin + int64_t{i} * kStageBytes, piece_bytes(i), full0 + 8 * i);
  }
  __syncthreads();
  unsigned acc = 0;
  for (int i = 0; i < pieces; ++i) {
    const int s = i % kStages;
    bulk_wait(full0 + 8 * s, (i / kStages) & 1);
    const uint4* stage = reinterpret_cast<const uint4*>(stages + s * kStageBytes);
    for (int j = static_cast<int>(threadIdx.x); j < static_cast<int>(piece_bytes(i) / 16); j += blockDim.x) {
      const uint4 v = stage[j];
      acc ^= v.x ^ v.w;
    }
    __syncthreads();
    if (threadIdx.x == 0 && i + kStages < pieces)
      bulk_load(stage0 + s * kStageBytes, w + begin + int64_t{i + kStages} * kStageBytes, piece_bytes(i + kStages),
                full0 + 8 * s);
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

using BulkKernel = void (*)(const char*, int64_t, unsigned*);

struct BulkVariant {
  int stage_bytes, stages;
  BulkKernel kernel;
};

struct Best {
  std::string how;
  double single_us = 1e30, phase_us = 1e30;
};

// Keeps the variant with the lowest phase time (the figure a step sees), and its single-launch time.
void consider(Best* best, const std::string& how, const Launch& launch, cudaStream_t stream) {
  const double phase = time_phases(launch, stream);
  if (phase < best->phase_us) *best = {how, time_single(launch, stream), phase};
}

}  // namespace

int main(int argc, char** argv) {
  unsigned* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  int sm_count = 0;
  check(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  const double copy = plumb::bench::copy_gbps();
  std::printf("device-to-device copy: %.1f GB/s (1 GiB, median of 10)\n", copy);
  std::printf("%8s %6s %7s | %-22s %8s %8s %6s | %-26s %8s %8s %6s\n", "N", "K", "MB", "register ring (R,split)",
              "single", "phase", "%copy", "bulk (stage,stages,blocks)", "single", "phase", "%copy");
  // The decode products of the two models (35B: GDN qkv|z|b|a 12352, attention q|k|v 9216, 8192 x 2048, out 2048 x
  // 4096, experts 1024 x 2048 and 2048 x 512 (eight of each: 8192 x 2048 and 16384 x 512, a B=1 step's routed experts),
  // the router stack's first 1280 of 1281 rows), and a 256 MiB matrix for the steady state.
  const int sizes[][2] = {{12352, 2048}, {9216, 2048}, {8192, 2048}, {2048, 4096}, {1024, 2048},
                          {2048, 512},   {16384, 512}, {1280, 2048}, {65536, 2048}};
  const struct {
    int ring;
    StreamKernel kernel;
  } rings[] = {{12, stream_rows<12>}, {24, stream_rows<24>}};
  const BulkVariant bulks[] = {{4096, 8, stream_bulk<4096, 8>},   {8192, 8, stream_bulk<8192, 8>},
                               {8192, 16, stream_bulk<8192, 16>}, {16384, 4, stream_bulk<16384, 4>},
                               {16384, 8, stream_bulk<16384, 8>}, {32768, 4, stream_bulk<32768, 4>},
                               {32768, 6, stream_bulk<32768, 6>}};
  constexpr int kBulkThreads = 256;
  for (const BulkVariant& v : bulks)
    check(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v.stage_bytes * v.stages),
          "cudaFuncSetAttribute");
  struct Row {
    int n, k;
    Best ring, bulk;
  };
  std::vector<Row> rows_out;
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
    Row row{n, k, {}, {}};
    for (const auto& ring : rings) {
      for (const int split : {1, 2, 4}) {
        if (k / split < 32 * ring.ring / 2 || (k / split) % 32 != 0) continue;
        constexpr int kWarpsPerBlock = 4;
        const int blocks = (n / 16 * split + kWarpsPerBlock - 1) / kWarpsPerBlock;
        consider(
            &row.ring, "(" + std::to_string(ring.ring) + "," + std::to_string(split) + ")",
            [&](int i, cudaStream_t s) {
              ring.kernel<<<blocks, 32 * kWarpsPerBlock, 0, s>>>(copies[i % copies.size()], n, k, split, sink);
            },
            stream);
      }
    }
    for (const BulkVariant& v : bulks) {
      int resident = 0;
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, v.kernel, kBulkThreads, v.stage_bytes * v.stages),
            "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      for (int per_sm = 1; per_sm <= resident && per_sm <= 4; per_sm *= 2) {
        const int blocks = per_sm * sm_count;
        consider(
            &row.bulk,
            "(" + std::to_string(v.stage_bytes / 1024) + "K," + std::to_string(v.stages) + "," +
                std::to_string(blocks) + ")",
            [&](int i, cudaStream_t s) {
              v.kernel<<<blocks, kBulkThreads, v.stage_bytes * v.stages, s>>>(
                  reinterpret_cast<const char*>(copies[i % copies.size()]), bytes, sink);
            },
            stream);
      }
    }
    for (uint16_t* c : copies) cudaFree(c);
    const auto pct = [&](double us) { return 100.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e9 / copy; };
    std::printf("%8d %6d %7.1f | %-22s %8.2f %8.2f %5.1f%% | %-26s %8.2f %8.2f %5.1f%%\n", n, k, bytes / 1e6,
                row.ring.how.c_str(), row.ring.single_us, row.ring.phase_us, pct(row.ring.phase_us),
                row.bulk.how.c_str(), row.bulk.single_us, row.bulk.phase_us, pct(row.bulk.phase_us));
    rows_out.push_back(row);
  }
  cudaFree(sink);
  if (argc > 1) {
    FILE* out = std::fopen(argv[1], "w");
    if (out == nullptr) {
      std::fprintf(stderr, "stream_ceiling: cannot write %s\n", argv[1]);
      return 1;
    }
    std::fprintf(out, "{\"benchmark\": \"stream_ceiling\", \"copy_gbps\": %.1f, \"results\": [\n", copy);
    for (size_t i = 0; i < rows_out.size(); ++i) {
      const Row& r = rows_out[i];
      std::fprintf(out,
                   "  {\"n\": %d, \"k\": %d, \"ring\": \"%s\", \"ring_single_us\": %.3f, \"ring_phase_us\": %.3f, "
                   "\"bulk\": \"%s\", \"bulk_single_us\": %.3f, \"bulk_phase_us\": %.3f}%s\n",
                   r.n, r.k, r.ring.how.c_str(), r.ring.single_us, r.ring.phase_us, r.bulk.how.c_str(),
                   r.bulk.single_us, r.bulk.phase_us, i + 1 < rows_out.size() ? "," : "");
    }
    std::fprintf(out, "]}\n");
    std::fclose(out);
  }
  return 0;
}
