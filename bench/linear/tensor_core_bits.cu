// Whether Hopper's warpgroup MMA (wgmma) can keep the products' bits. The fixed K-slice contract
// (docs/kernel-contract.md) fixes what each tensor-core step adds: a slice is eight m16n8k16 k-steps of mma.sync,
// each a fixed set of 16 k in fixed fragment slots (kernels/linear_common.cuh, mma_chunk). A prefill kernel on wgmma
// keeps the decode kernels' bits only if a wgmma k16 step, given the same values in the same slots, rounds exactly as
// mma.sync's does. This probe answers that, and what the slots' order within a step does, on random BF16 operands
// whose exponents span a wide range (so the steps' alignment and rounding are exercised, not only exact sums):
//
//   step from zero     one k16 step into a zero accumulator: mma.sync against wgmma (A from registers, B from shared
//                      memory), bit for bit
//   step into C        the same into a random F32 accumulator
//   slice              eight steps from zero (one 128-wide slice)
//   slots permuted     mma.sync with the 16 k of each step in another slot order (the same in A and B) against the
//                      original order: whether a step's sum depends on where its terms sit
//   sets exchanged     mma.sync with k 0-15 / 16-31 as the two steps of a 32-wide chunk, against the contract's
//                      interleaved sets: a control, expected to differ
//
// Each test runs `trials` blocks of one warpgroup (4 warps, 64 x 8 outputs each) and counts the outputs whose bits
// differ. Usage: tensor_core_bits [trials] [out.json]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/kernels/ptx.cuh"
#include "weight_stream.cuh"

namespace {

using plumb::bench::check;
using plumb::cuda::mma_bf16_16816;
using plumb::cuda::shared_address;

constexpr int kM = 64, kN = 8, kSteps = 8, kK = 16 * kSteps;  // one warpgroup's tile over one 128-wide slice

// d = c + a·b over one k16 step on the warpgroup: A [64, 16] from each warp's mma.sync fragment registers, B from
// shared memory in the no-swizzle K-major layout (two 8 x 8 core matrices, k 0-7 then k 8-15, 128 bytes each).
__device__ __forceinline__ void wgmma_step(float (&d)[4], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// Shared-memory matrix descriptor: start address, leading (k) and stride (n) byte offsets between core matrices,
// no swizzle. With one core matrix along n both offsets may be 128: either reading of the two fields finds k 8-15
// 128 bytes after k 0-7.
__device__ __forceinline__ uint64_t b_descriptor(const void* smem) {
  const uint64_t address = shared_address(smem);
  return ((address & 0x3FFFF) >> 4) | (uint64_t{128 >> 4} << 16) | (uint64_t{128 >> 4} << 32);
}

enum Test : int { kStepFromZero, kStepIntoC, kSlice, kSlotsPermuted, kSetsExchanged, kTests };
const char* const kTestNames[kTests] = {"step from zero", "step into C", "slice (8 steps)", "slots permuted",
                                        "sets exchanged"};

// Slot c of step s holds k = slot_k(layout, s, c) of the block's 128 k. Layout 0: the contract's (mma_chunk: the lane
// with t = c % 8 / 2 reads k 8t .. 8t + 7 of chunk s / 2; its pairs 0 and 1 go to step s % 2 == 0, pairs 2, 3 to
// step 1); layout 1: the same sets with each step's 16 slots reversed; layout 2: contiguous sets (k 16s .. 16s + 15).
__host__ __device__ inline int slot_k(int layout, int s, int c) {
  if (layout == 2) return 16 * s + c;
  if (layout == 1) c = 15 - c;
  const int t = c % 8 / 2, high = c / 8, pair = 2 * (s % 2) + high;
  return 32 * (s / 2) + 8 * t + 2 * pair + c % 2;
}

// Block = one trial: a [64, 128] and b [8, 128] BF16 (row-major, k contiguous), c [64, 8] F32. out[test][64 x 8] of
// each path: mma.sync in `ref`, the path under test in `got`.
__global__ void probe(const uint16_t* a_all, const uint16_t* b_all, const float* c_all, float* ref_all,
                      float* got_all) {
  __shared__ __align__(128) uint16_t b_stage[kN * 16];
  const int trial = static_cast<int>(blockIdx.x);
  const uint16_t* a = a_all + static_cast<int64_t>(trial) * kM * kK;
  const uint16_t* b = b_all + static_cast<int64_t>(trial) * kN * kK;
  const float* c = c_all + static_cast<int64_t>(trial) * kM * kN;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int row_lo = 16 * warp + g, row_hi = row_lo + 8;
  // Fragment registers of step s in layout L: A slots (row, 2t, 2t+1), (row + 8, ...), (row, 2t + 8, 2t + 9), ...;
  // B slots (2t, 2t + 1) and (2t + 8, 2t + 9) of column g.
  const auto pair = [](const uint16_t* row, int layout, int s, int c0) {
    return static_cast<uint32_t>(row[slot_k(layout, s, c0)]) | static_cast<uint32_t>(row[slot_k(layout, s, c0 + 1)])
                                                                   << 16;
  };
  const auto a_frag = [&](int layout, int s, uint32_t(&r)[4]) {
    r[0] = pair(a + row_lo * kK, layout, s, 2 * t);
    r[1] = pair(a + row_hi * kK, layout, s, 2 * t);
    r[2] = pair(a + row_lo * kK, layout, s, 2 * t + 8);
    r[3] = pair(a + row_hi * kK, layout, s, 2 * t + 8);
  };
  // The accumulator a test starts from: c's tile, or zeros.
  const auto start = [&](bool from_c, float(&d)[4]) {
    if (from_c) {
      d[0] = c[row_lo * kN + 2 * t], d[1] = c[row_lo * kN + 2 * t + 1];
      d[2] = c[row_hi * kN + 2 * t], d[3] = c[row_hi * kN + 2 * t + 1];
    } else {
      d[0] = d[1] = d[2] = d[3] = 0.0f;
    }
  };
  const auto mma_steps = [&](int layout, int steps, bool from_c, float(&d)[4]) {
    start(from_c, d);
    for (int s = 0; s < steps; ++s) {
      uint32_t r[4];
      a_frag(layout, s, r);
      mma_bf16_16816(d, r[0], r[1], r[2], r[3], pair(b + g * kK, layout, s, 2 * t),
                     pair(b + g * kK, layout, s, 2 * t + 8));
    }
  };
  const auto wgmma_steps = [&](int steps, bool from_c, float(&d)[4]) {
    start(from_c, d);
    for (int s = 0; s < steps; ++s) {
      // B's step s in the contract's slots: core matrix h (slots 8h .. 8h + 7) row n at byte 128h + 16n.
      __syncthreads();
      for (int i = static_cast<int>(threadIdx.x); i < kN * 16; i += static_cast<int>(blockDim.x)) {
        const int n = i / 16, slot = i % 16;
        b_stage[(slot / 8) * 64 + n * 8 + slot % 8] = b[n * kK + slot_k(0, s, slot)];
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
      uint32_t r[4];
      a_frag(0, s, r);
      wgmma_step(d, r, b_descriptor(b_stage));
    }
  };
  const auto store = [&](float* out, int test, const float(&d)[4]) {
    float* o = out + (static_cast<int64_t>(trial) * kTests + test) * kM * kN;
    o[row_lo * kN + 2 * t] = d[0], o[row_lo * kN + 2 * t + 1] = d[1];
    o[row_hi * kN + 2 * t] = d[2], o[row_hi * kN + 2 * t + 1] = d[3];
  };
  float ref[4], got[4];
  mma_steps(0, 1, false, ref);
  wgmma_steps(1, false, got);
  store(ref_all, kStepFromZero, ref), store(got_all, kStepFromZero, got);
  mma_steps(0, 1, true, ref);
  wgmma_steps(1, true, got);
  store(ref_all, kStepIntoC, ref), store(got_all, kStepIntoC, got);
  mma_steps(0, kSteps, false, ref);
  wgmma_steps(kSteps, false, got);
  store(ref_all, kSlice, ref), store(got_all, kSlice, got);
  mma_steps(1, kSteps, false, got);
  store(ref_all, kSlotsPermuted, ref), store(got_all, kSlotsPermuted, got);
  mma_steps(2, kSteps, false, got);
  store(ref_all, kSetsExchanged, ref), store(got_all, kSetsExchanged, got);
}

// A random BF16 of sign ±, exponent spread over `spread` binades around 1, random mantissa.
uint16_t random_bf16(std::mt19937& rng, int spread) {
  const uint32_t sign = rng() & 1u, exponent = 127 - spread / 2 + rng() % spread, mantissa = rng() & 0x7f;
  return static_cast<uint16_t>(sign << 15 | exponent << 7 | mantissa);
}

}  // namespace

int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 2048;
  if (trials <= 0) {
    std::fprintf(stderr, "tensor_core_bits: trials must be positive, not %s\n", argv[1]);
    return 2;
  }
  std::mt19937 rng(20261204);
  std::vector<uint16_t> a(static_cast<size_t>(trials) * kM * kK), b(static_cast<size_t>(trials) * kN * kK);
  std::vector<float> c(static_cast<size_t>(trials) * kM * kN);
  // A quarter of the trials with every exponent within 4 binades, the rest within 24 (terms that cancel and terms
  // far below the largest, where a step's alignment decides the low bits).
  for (int i = 0; i < trials; ++i) {
    const int spread = i % 4 == 0 ? 4 : 24;
    for (int j = 0; j < kM * kK; ++j) a[static_cast<size_t>(i) * kM * kK + j] = random_bf16(rng, spread);
    for (int j = 0; j < kN * kK; ++j) b[static_cast<size_t>(i) * kN * kK + j] = random_bf16(rng, spread);
    for (int j = 0; j < kM * kN; ++j) {
      const uint32_t bits = static_cast<uint32_t>(random_bf16(rng, spread)) << 16 | (rng() & 0xffffu);
      std::memcpy(&c[static_cast<size_t>(i) * kM * kN + j], &bits, sizeof bits);
    }
  }
  uint16_t *a_d, *b_d;
  float *c_d, *ref_d, *got_d;
  const size_t out_count = static_cast<size_t>(trials) * kTests * kM * kN;
  check(cudaMalloc(&a_d, a.size() * 2), "cudaMalloc");
  check(cudaMalloc(&b_d, b.size() * 2), "cudaMalloc");
  check(cudaMalloc(&c_d, c.size() * 4), "cudaMalloc");
  check(cudaMalloc(&ref_d, out_count * 4), "cudaMalloc");
  check(cudaMalloc(&got_d, out_count * 4), "cudaMalloc");
  check(cudaMemcpy(a_d, a.data(), a.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(b_d, b.data(), b.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(c_d, c.data(), c.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  probe<<<trials, 128>>>(a_d, b_d, c_d, ref_d, got_d);
  check(cudaGetLastError(), "probe");
  check(cudaDeviceSynchronize(), "probe");
  std::vector<float> ref(out_count), got(out_count);
  check(cudaMemcpy(ref.data(), ref_d, out_count * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(got.data(), got_d, out_count * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");

  // A sanity check that the wgmma path computes the product at all: the slice against a double-precision sum.
  double worst_rel = 0;
  for (int i = 0; i < trials; ++i) {
    for (int m = 0; m < kM; ++m) {
      for (int n = 0; n < kN; ++n) {
        double exact = 0, magnitude = 0;
        for (int k = 0; k < kK; ++k) {
          uint32_t ab = static_cast<uint32_t>(a[(static_cast<size_t>(i) * kM + m) * kK + k]) << 16;
          uint32_t bb = static_cast<uint32_t>(b[(static_cast<size_t>(i) * kN + n) * kK + k]) << 16;
          float av, bv;
          std::memcpy(&av, &ab, 4), std::memcpy(&bv, &bb, 4);
          exact += static_cast<double>(av) * bv, magnitude += std::abs(static_cast<double>(av) * bv);
        }
        const double v = got[((static_cast<size_t>(i) * kTests + kSlice) * kM + m) * kN + n];
        worst_rel = std::max(worst_rel, std::abs(v - exact) / magnitude);
      }
    }
  }
  std::printf(
      "tensor_core_bits: %d trials of 64 x 8 outputs; wgmma slice against the exact sum: worst |err| / sum|terms| "
      "%.3g\n",
      trials, worst_rel);
  std::printf("%-18s %12s %12s\n", "test", "outputs", "bits differ");
  FILE* out = argc > 2 ? std::fopen(argv[2], "w") : nullptr;
  if (out)
    std::fprintf(out, "{\"benchmark\": \"tensor_core_bits\", \"trials\": %d, \"worst_rel\": %.4g, \"tests\": [\n",
                 trials, worst_rel);
  for (int test = 0; test < kTests; ++test) {
    int64_t differ = 0;
    for (int i = 0; i < trials; ++i) {
      const size_t base = (static_cast<size_t>(i) * kTests + test) * kM * kN;
      for (int j = 0; j < kM * kN; ++j) differ += std::memcmp(&ref[base + j], &got[base + j], 4) != 0;
    }
    std::printf("%-18s %12lld %12lld\n", kTestNames[test], static_cast<long long>(trials) * kM * kN,
                static_cast<long long>(differ));
    if (out)
      std::fprintf(out, "  {\"test\": \"%s\", \"outputs\": %lld, \"differ\": %lld}%s\n", kTestNames[test],
                   static_cast<long long>(trials) * kM * kN, static_cast<long long>(differ),
                   test + 1 < kTests ? "," : "");
  }
  if (out) {
    std::fprintf(out, "]}\n");
    std::fclose(out);
  }
  return worst_rel < 1e-2 ? 0 : 1;
}
