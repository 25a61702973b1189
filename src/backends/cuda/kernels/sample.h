// Selection on the GPU: the MoE router (softmax over the experts, top-k, optional renormalization; one thread block
// per token) and token sampling (greedy, or temperature with top-k and top-p; a cluster of up to 16 blocks per row).
//
// Exactness: every sum has an order fixed by the row length; the sampler's sums are integers (64-bit fixed point),
// exact in any order. A row's result never depends on the other rows of the call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/fault.h"

namespace plumb::cuda {

// The most experts moe_route handles (its probabilities live in shared memory).
constexpr int kMaxRouteExperts = 4096;

// Per token: p = softmax(logits[t]); the top_k experts by p, best first, ties to the lower id; weights p, or p over
// the sum of the kept p when renormalize.
struct MoeRouteParams {
  const float* logits = nullptr;    // [tokens, experts]
  int32_t* expert_ids = nullptr;    // [tokens, top_k]
  float* expert_weights = nullptr;  // [tokens, top_k]
  int64_t tokens = 0;
  int32_t experts = 0;  // at most kMaxRouteExperts
  int32_t top_k = 0;    // in [1, experts]
  bool renormalize = false;
};
void launch_moe_route(const MoeRouteParams& params, KernelFault fault, cudaStream_t stream);
// The dynamic shared memory (bytes) launch_moe_route gives its kernel (for the resource records).
size_t moe_route_smem_bytes(int experts, int top_k);

// One row's draw, prepared on the host from a TokenDraw.
struct SampleDraw {
  int32_t greedy = 0;            // 1: the argmax of the logits, ties to the lowest id (temperature 0)
  float inv_temperature = 1.0f;  // 1 / temperature, rounded to float once, as the CPU reference rounds it
  int64_t top_k = 0;             // 0, or at least the vocabulary: keep every token
  float top_p = 1.0f;            // at least 1: no nucleus cut
  uint32_t u24 = 0;              // the draw's u times 2^24: uniform_f32_from_counter(seed, step) as an integer
  int64_t allowed = -1;          // the row's first word in SampleTokensParams::allowed; -1: every token may come
};

struct SampleTokensParams {
  const float* logits = nullptr;      // [rows, vocab]
  const SampleDraw* draws = nullptr;  // [rows] device
  // Device bits of the allowed tokens of the rows that have them, allowed_words(vocab) words a row (token t: bit t % 32
  // of word t / 32); a token not allowed draws as if its logit were -inf. Null when no row has them.
  const uint32_t* allowed = nullptr;
  int32_t* ids = nullptr;  // [rows]
  int64_t rows = 0;
  int64_t vocab = 0;  // in [1, 2^31)
};
void launch_sample_tokens(const SampleTokensParams& params, KernelFault fault, cudaStream_t stream);

}  // namespace plumb::cuda
