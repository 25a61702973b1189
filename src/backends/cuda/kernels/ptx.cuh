// The PTX and memory-access primitives the kernel families share: shared-space addresses, asynchronous global ->
// shared copies (cp.async), shared-memory matrix fragment loads (ldmatrix), shared-memory barriers and register
// budgets for warp-specialized blocks, streamed weight loads and BF16 packing.
// One definition each, so a kernel family states what it does with them, never how a primitive is spelled.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace plumb::cuda {

// The shared-space address of a pointer into shared memory, as cp.async and ldmatrix take it.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- Asynchronous global -> shared copies (cp.async). A thread's copies are visible to it after a wait; to the
// rest of the block after a barrier that follows the wait. ----

// 16 bytes, cached in L2 only.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const uint32_t dst = shared_address(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}
// 16 bytes to a shared-space address, zero-filled when !valid: with a source size of 0 nothing is read (gmem must
// still be a mapped address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  cp_async_16(shared_address(smem), gmem, valid);
}
// 16 bytes read once, with the whole 128-byte line fetched into L2: the neighbours in k read the rest of it soon.
__device__ __forceinline__ void cp_async_16_line(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(shared_address(smem)), "l"(gmem)
               : "memory");
}
// 8 bytes (gmem 8-byte aligned), zero-filled when !valid as cp_async_16 (copies of fewer than 16 bytes go through L1).
__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(shared_address(smem)), "l"(gmem), "r"(src_bytes)
               : "memory");
}
// 4 bytes (cp.async copies of fewer than 16 bytes go through L1).
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared_address(smem)), "l"(gmem) : "memory");
}
// Closes the thread's copies issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending of the thread's most recent groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// Waits for every copy of the thread, committed to a group or not.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// ---- Shared-memory fragment loads (ldmatrix): four 8 x 8 tiles of 16-bit elements; lanes 8m .. 8m + 7 give the
// shared-space addresses of tile m's rows (16-byte aligned), and lane (g, t) receives elements 2t, 2t + 1 of row g
// of tile m in r[m] (of column g, rows 2t and 2t + 1, when transposed). ----

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// ---- Shared-memory barriers (mbarrier) between the warps of a block. A barrier's phase completes when the count it
// was initialized with has arrived, and it then starts the next; a waiter names the parity of the phase it waits for
// (0 for the first). An arrival releases what the thread wrote before it, and a completed wait acquires it. ----

__device__ __forceinline__ void mbarrier_init(void* barrier, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(void* barrier) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(shared_address(barrier))
      : "memory");
}
__device__ __forceinline__ void mbarrier_wait(void* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "waiting:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra waiting;\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// Adds `bytes` to what the barrier's current phase waits for besides its arrivals: the bytes of copy-engine copies
// that complete at it (tensor_copy_2d).
__device__ __forceinline__ void mbarrier_expect_bytes(void* barrier, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
}
// Copies the box at coordinates (c0, c1) of the 2-D tensor that `map` (a CUtensorMap kernel parameter) describes to
// shared memory at `smem` with the copy engine (TMA, sm_90); its bytes count in at `barrier` as they land.
__device__ __forceinline__ void tensor_copy_2d(void* smem, const void* map, int c0, int c1, void* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(shared_address(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(shared_address(barrier))
      : "memory");
}

// Orders the thread's earlier writes to shared memory through the generic proxy (stores, completed cp.async copies)
// before what the async proxy (wgmma's shared-memory operands) reads after a synchronization that follows.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- Register budgets of a warp-specialized block (sm_90a): every warp of a warpgroup moves its threads' register
// count to kRegisters (a multiple of 8, 24 to 256) together; a raise waits until another warpgroup's lowering has
// freed the registers. ----

template <int kRegisters>
__device__ __forceinline__ void lower_register_budget() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
__device__ __forceinline__ void raise_register_budget() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// ---- Tensor cores. ----

// d += a·b over one m16n8k16 step: BF16 operands (a0..a3 the lane's part of the 16 x 16 A fragment, b0, b1 of the
// 16 x 8 B fragment), F32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += a·b over one m16n8k32 step: E4M3 operands, four a register (a0..a3 the lane's part of the 16 x 32 A fragment,
// b0, b1 of the 32 x 8 B fragment), F32 accumulators. No product kernel uses it yet
// (bench/linear/quantized_stream_arith measures what it would take back from the FP8 products' widening).
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---- Global loads. ----

// 16 bytes of weights that are read once: not kept in L1, and the whole 128-byte line fetched into L2 (the lane's
// neighbours in k read the rest of it soon).
__device__ __forceinline__ uint4 load_streamed(const uint16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 8 bytes of weights that are read once, as load_streamed.
__device__ __forceinline__ uint2 load_streamed_8(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// 4 bytes of weights that are read once, as load_streamed.
__device__ __forceinline__ uint32_t load_streamed_4(const uint8_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

// d = bytes of {b, a} (a bytes 0-3, b bytes 4-7) picked by the four low nibbles of `selector`: nibble i's low 3 bits
// pick output byte i, and its bit 3 (sign mode) replicates the top bit of that byte instead.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// ---- BF16. ----

// Two F32 values as a BF16 pair rounded to nearest even, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
}

// Two E4M3 values (`pair`'s low byte the first) as a BF16 pair, the first in the low half. Exact for every finite
// code, with full-rate integer and BF16 instructions (the cvt instructions between FP8, F16 and F32 run at a
// sixteenth of that rate and made the FP8 products slower than BF16's): each code's sign goes to the top bit and its
// exponent and mantissa bits below it, which is the BF16 value code · 2^-120 (E4M3's exponent bias is 7, BF16's 127;
// the E4M3 subnormals land on BF16 subnormals), and one BF16 multiply by 2^120 (exact: a power of two, every result
// representable) restores the value. The NaN codes 0x7f and 0xff become ±480, a value no finite code has.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t pair) {
  const uint32_t spread = __byte_perm(pair, 0, 0x1404);  // code 0 in bits 8-15, code 1 in bits 24-31
  const uint32_t scaled = (spread & 0x80008000u) | ((spread >> 4) & 0x07f007f0u);
  uint32_t value;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(value) : "r"(scaled), "r"(0x7b807b80u));  // 2^120 in each half
  return value;
}

}  // namespace plumb::cuda
