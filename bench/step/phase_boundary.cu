// What a dependency between two phases of a decode step costs, as plumb runs them today (one kernel per phase,
// programmatic launches replayed from a CUDA graph) and as a persistent kernel would (every multiprocessor resident
// for the whole run, the phases separated by a grid-wide barrier), on the work a B=1 step is made of:
//   tiny     one block reads the value the phase before wrote and writes the next (the latency of the boundary alone);
//   norm     one block of 256 threads reads 2048 floats, reduces their squares, writes 2048 (an add + RMSNorm);
//   product  every multiprocessor streams a BF16 weight matrix in the decode products' load pattern (16 rows a warp,
//            16 bytes a lane, a ring of chunks in registers), each warp first reading a value of the phase before;
//            matrices rotate through 512 MB so L2 never serves them. The persistent kernel runs it twice: loading a
//            phase's weights after the barrier, and issuing the next phase's first ring of weights before it (weights
//            do not depend on the phase before), which no sequence of launches can do;
//   norm after a stream  the norm launched after each product phase, its data then written one product earlier:
//            what it adds to the product (the pair's time less the product's), against the norm row's data in L2.
// Each figure is the median over 7 runs of the wall time of `phases` phases (one graph replay, or one persistent
// launch) divided by the phases, in µs; a product's also as its bytes' rate against the device-to-device copy
// bandwidth measured in the same run. Usage: phase_boundary [out.json]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/kernels/launch.cuh"
#include "linear/weight_stream.cuh"

namespace {

using plumb::bench::check;
using plumb::bench::drain_ring;
using plumb::bench::fill_ring;
using plumb::bench::warp_rows;
using plumb::bench::WarpRows;
using plumb::cuda::launch_kernel;
using plumb::cuda::wait_for_prior_grid;

constexpr int kNormDim = 2048;
constexpr int kThreads = 256;
constexpr int kRing = 8;  // chunks of 32 k in flight per warp

// ---- The work of one phase, shared by both ways of running it. ----

// Block 0 only: dst[0] = src[0] + 1.
__device__ void tiny_phase(const float* src, float* dst) {
  if (blockIdx.x == 0 && threadIdx.x == 0) dst[0] = src[0] + 1.0f;
}

// Block 0 only: dst = src / sqrt(mean(src²) + eps), a 256-thread reduction.
__device__ void norm_phase(const float* src, float* dst) {
  if (blockIdx.x != 0) return;
  __shared__ float partial[kThreads / 32];
  float v[kNormDim / kThreads], sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormDim / kThreads; ++i) {
    v[i] = src[threadIdx.x + i * kThreads];
    sum += v[i] * v[i];
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float scale = rsqrtf(total / kNormDim + 1e-6f);
#pragma unroll
  for (int i = 0; i < kNormDim / kThreads; ++i) dst[threadIdx.x + i * kThreads] = v[i] * scale;
  __syncthreads();  // partial is reused by the next phase
}

struct ProductArgs {
  const uint16_t* const* matrices;  // [copies] device pointers, each [n, k] BF16
  int copies, n, k, split;
  unsigned* out;  // [phases + 1, warps]: each warp's value of a phase
  int warps;
};

// ---- One kernel per phase. ----

__global__ void __launch_bounds__(kThreads) tiny_kernel(float* buf, int phase) {
  wait_for_prior_grid();
  tiny_phase(buf + phase, buf + phase + 1);
}

__global__ void __launch_bounds__(kThreads) norm_kernel(float* buf, int phase) {
  wait_for_prior_grid();
  norm_phase(buf + static_cast<int64_t>(phase) * kNormDim, buf + static_cast<int64_t>(phase + 1) * kNormDim);
}

__global__ void __launch_bounds__(kThreads) product_kernel(ProductArgs a, int phase) {
  wait_for_prior_grid();
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  const WarpRows r = warp_rows(a.matrices[phase % a.copies], a.n, a.k, a.split);
  uint4 ring[kRing][2];
  fill_ring(r, ring);
  // The phase before's value, read after the wait as a product reads its activations.
  const unsigned before = a.out[static_cast<int64_t>(phase) * a.warps + (warp + 1) % a.warps];
  const unsigned acc = drain_ring(r, ring) ^ before;
  if (threadIdx.x % 32 == 0 && warp < a.warps) a.out[static_cast<int64_t>(phase + 1) * a.warps + warp] = acc;
}

// ---- One persistent kernel. ----

// A sense-reversing barrier over every block of the grid (all resident: launched cooperatively).
__device__ void grid_barrier(unsigned* count, unsigned* generation) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned seen = *reinterpret_cast<volatile unsigned*>(generation);
    __threadfence();
    if (atomicAdd(count, 1u) == gridDim.x - 1) {
      *count = 0;
      __threadfence();
      atomicAdd(generation, 1u);
    } else {
      while (*reinterpret_cast<volatile unsigned*>(generation) == seen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

struct Barrier {
  unsigned* count;
  unsigned* generation;
};

__global__ void __launch_bounds__(kThreads) tiny_persistent(float* buf, int phases, Barrier b) {
  for (int i = 0; i < phases; ++i) {
    tiny_phase(buf + i, buf + i + 1);
    grid_barrier(b.count, b.generation);
  }
}

__global__ void __launch_bounds__(kThreads) norm_persistent(float* buf, int phases, Barrier b) {
  for (int i = 0; i < phases; ++i) {
    norm_phase(buf + static_cast<int64_t>(i) * kNormDim, buf + static_cast<int64_t>(i + 1) * kNormDim);
    grid_barrier(b.count, b.generation);
  }
}

// kOverlap: the next phase's first ring of weights is in flight across the barrier.
template <bool kOverlap>
__global__ void __launch_bounds__(kThreads) product_persistent(ProductArgs a, int phases, Barrier b) {
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  uint4 ring[kRing][2];
  WarpRows r = warp_rows(a.matrices[0], a.n, a.k, a.split);
  fill_ring(r, ring);
  for (int i = 0; i < phases; ++i) {
    if (!kOverlap && i > 0) {
      r = warp_rows(a.matrices[i % a.copies], a.n, a.k, a.split);
      fill_ring(r, ring);
    }
    const unsigned before = a.out[static_cast<int64_t>(i) * a.warps + (warp + 1) % a.warps];
    const unsigned acc = drain_ring(r, ring) ^ before;
    if (threadIdx.x % 32 == 0 && warp < a.warps) a.out[static_cast<int64_t>(i + 1) * a.warps + warp] = acc;
    if (kOverlap && i + 1 < phases) {
      r = warp_rows(a.matrices[(i + 1) % a.copies], a.n, a.k, a.split);
      fill_ring(r, ring);
    }
    grid_barrier(b.count, b.generation);
  }
}

// ---- Timing. ----

// Median µs per phase of 7 timed calls of `work` (each running `phases` phases) after 2 untimed ones.
template <class Work>
float per_phase_us(int phases, Work work, cudaStream_t stream) {
  return plumb::bench::median_ms(
             2, 7, [&](int) { work(); }, stream) *
         1e3f / static_cast<float>(phases);
}

// The phases as programmatic launches captured into one graph, replayed.
template <class Launch>
float graph_us(int phases, Launch launch, cudaStream_t stream) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < phases; ++i) launch(i);
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  const float us = per_phase_us(
      phases, [&] { check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); }, stream);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us;
}

// The persistent kernel, one block per multiprocessor, launched cooperatively so all are resident.
template <typename... Params, typename... Args>
float persistent_us(int phases, void (*kernel)(Params...), int blocks, cudaStream_t stream, Args... args) {
  void* arg_ptrs[] = {static_cast<void*>(&args)...};
  return per_phase_us(
      phases,
      [&] {
        check(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(kThreads), arg_ptrs,
                                          0, stream),
              "cudaLaunchCooperativeKernel");
      },
      stream);
}

struct Row {
  std::string work;
  double mb;  // weights a phase reads (0: none)
  float launches, persistent, overlapped;
};

}  // namespace

int main(int argc, char** argv) {
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const double copy = plumb::bench::copy_gbps();
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  unsigned* barrier_words = nullptr;
  check(cudaMalloc(&barrier_words, 2 * sizeof(unsigned)), "cudaMalloc");
  check(cudaMemset(barrier_words, 0, 2 * sizeof(unsigned)), "cudaMemset");
  const Barrier barrier{barrier_words, barrier_words + 1};
  std::vector<Row> rows;

  constexpr int kPhases = 200;
  float* buf = nullptr;
  check(cudaMalloc(&buf, static_cast<size_t>(kPhases + 1) * kNormDim * sizeof(float)), "cudaMalloc");
  check(cudaMemset(buf, 0, static_cast<size_t>(kPhases + 1) * kNormDim * sizeof(float)), "cudaMemset");
  // A one-block phase in a graph launches one block; the persistent kernel holds every multiprocessor.
  rows.push_back({"tiny (1 block, 1 value)", 0,
                  graph_us(
                      kPhases, [&](int i) { launch_kernel(tiny_kernel, 1, kThreads, 0, stream, buf, i); }, stream),
                  persistent_us(kPhases, tiny_persistent, sms, stream, buf, kPhases, barrier), 0});
  rows.push_back({"norm (1 block, 2048 floats)", 0,
                  graph_us(
                      kPhases, [&](int i) { launch_kernel(norm_kernel, 1, kThreads, 0, stream, buf, i); }, stream),
                  persistent_us(kPhases, norm_persistent, sms, stream, buf, kPhases, barrier), 0});

  // Products of the 35B step: out_proj and o_proj (2048 × 4096), an expert's down (2048 × 512) as the 8 of a B=1
  // step together (16384 × 512), the GDN input product (12352 × 2048).
  const int sizes[][3] = {{2048, 4096, 8}, {16384, 512, 1}, {12352, 2048, 1}};
  constexpr int kProductPhases = 32;
  for (const auto& size : sizes) {
    const int n = size[0], k = size[1], split = size[2];
    const int64_t count = int64_t{n} * k, bytes = 2 * count;
    const int copies = static_cast<int>(std::max<int64_t>(2, ((int64_t{512} << 20) + bytes - 1) / bytes));
    std::vector<uint16_t*> host_ptrs(copies);
    for (uint16_t*& m : host_ptrs) {
      check(cudaMalloc(&m, bytes), "cudaMalloc");
      plumb::bench::fill_pattern<<<1024, 256>>>(m, count);
    }
    const uint16_t** matrices = nullptr;
    check(cudaMalloc(&matrices, copies * sizeof(uint16_t*)), "cudaMalloc");
    check(cudaMemcpy(matrices, host_ptrs.data(), copies * sizeof(uint16_t*), cudaMemcpyHostToDevice), "cudaMemcpy");
    const int warps = sms * kThreads / 32;
    if (n / 16 * split > warps) {
      std::fprintf(stderr, "phase_boundary: %d x %d split %d needs more warps than %d\n", n, k, split, warps);
      return 1;
    }
    unsigned* out = nullptr;
    check(cudaMalloc(&out, static_cast<size_t>(kProductPhases + 1) * warps * sizeof(unsigned)), "cudaMalloc");
    check(cudaMemset(out, 0, static_cast<size_t>(kProductPhases + 1) * warps * sizeof(unsigned)), "cudaMemset");
    check(cudaDeviceSynchronize(), "fill");
    const ProductArgs args{matrices, copies, n, k, split, out, warps};
    const auto launch_product = [&](int i) {
      launch_kernel(product_kernel, static_cast<unsigned>(sms), kThreads, 0, stream, args, i);
    };
    const float product_us = graph_us(kProductPhases, launch_product, stream);
    rows.push_back(
        {"product " + std::to_string(n) + " x " + std::to_string(k), bytes / 1e6, product_us,
         persistent_us(kProductPhases, product_persistent<false>, sms, stream, args, kProductPhases, barrier),
         persistent_us(kProductPhases, product_persistent<true>, sms, stream, args, kProductPhases, barrier)});
    // The norm as a step meets it: after a weight stream, its input and output written one product earlier. What it
    // adds to the product before it, against the norm phases above, whose data stays in L2.
    const float pair_us = graph_us(
        kProductPhases,
        [&](int i) {
          launch_product(i);
          launch_kernel(norm_kernel, 1, kThreads, 0, stream, buf, i);
        },
        stream);
    rows.push_back({"norm after a " + std::to_string(bytes / 1000000) + " MB stream", 0, pair_us - product_us, 0, 0});
    cudaFree(out);
    cudaFree(matrices);
    for (uint16_t* m : host_ptrs) cudaFree(m);
  }

  // A phase's weights over its time, in % of the copy bandwidth ("-" for a phase without weights or a time).
  const auto of_copy = [&](const Row& r, float us, char(&cell)[32]) {
    std::snprintf(cell, sizeof(cell), "-");
    if (r.mb > 0 && us > 0)
      std::snprintf(cell, sizeof(cell), "%.2f (%.0f%%)", us, 100.0 * r.mb * 1e3 / us / copy);
    else if (us > 0)
      std::snprintf(cell, sizeof(cell), "%.2f", us);
  };
  std::printf("device-to-device copy: %.1f GB/s (1 GiB, median of 10)\n", copy);
  std::printf("µs per phase (median of 7 runs of %d phases; products %d), products also in %% of the copy rate\n",
              kPhases, kProductPhases);
  std::printf("%-30s %8s %14s %14s %16s\n", "phase", "MB", "launches", "persistent", "next in flight");
  for (const Row& r : rows) {
    char launches[32], persistent[32], overlapped[32];
    of_copy(r, r.launches, launches);
    of_copy(r, r.persistent, persistent);
    of_copy(r, r.overlapped, overlapped);
    std::printf("%-30s %8.1f %14s %14s %16s\n", r.work.c_str(), r.mb, launches, persistent, overlapped);
  }
  if (argc > 1) {
    FILE* out = std::fopen(argv[1], "w");
    if (out == nullptr) {
      std::fprintf(stderr, "phase_boundary: cannot write %s\n", argv[1]);
      return 1;
    }
    std::fprintf(out, "{\"benchmark\": \"phase_boundary\", \"sms\": %d, \"copy_gbps\": %.1f, \"rows\": [", sms, copy);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::fprintf(out, "%s{\"phase\": \"%s\", \"mb\": %.3f, \"launches_us\": %.3f", i ? ", " : "",
                   rows[i].work.c_str(), rows[i].mb, rows[i].launches);
      if (rows[i].persistent > 0) std::fprintf(out, ", \"persistent_us\": %.3f", rows[i].persistent);
      if (rows[i].overlapped > 0) std::fprintf(out, ", \"next_in_flight_us\": %.3f", rows[i].overlapped);
      std::fprintf(out, "}");
    }
    std::fprintf(out, "]}\n");
    std::fclose(out);
  }
  cudaFree(buf);
  cudaFree(barrier_words);
  return 0;
}
