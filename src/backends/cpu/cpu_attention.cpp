// Rotary embedding and causal grouped-query attention over paged caches on the CPU.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/checks.h"

namespace plumb {

void CpuBackend::rotary_embedding(Tensor& x, const std::vector<int64_t>& positions, int64_t rotary_dim, double theta) {
  const int64_t T = x.dim(0), heads = x.dim(1), d = x.dim(2), half = rotary_dim / 2;
  PLUMB_CHECK(static_cast<int64_t>(positions.size()) == T, "rotary_embedding: {} positions for {} tokens",
              positions.size(), T);
  PLUMB_CHECK(rotary_dim % 2 == 0 && rotary_dim <= d, "rotary_embedding: rotary dim {} for head dim {}", rotary_dim, d);
  // Frequencies and angles in FP32, as the reference computes them: inv_freq_i = 1 / theta^(2i / rotary_dim).
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] =
        1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
  float* px = x.f32();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float* v = px + (t * heads + h) * d;
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
}

// Every query alike, lone or not: the rule changes nothing here.
void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<KvCache*>& caches,
                           const BatchRows& batch, Tensor& o, GdnAlgorithm /*rule*/) {
  const int64_t T = q.dim(0), nq = q.dim(1), d = q.dim(2), nkv = k.dim(1);
  PLUMB_CHECK(nq % nkv == 0, "attention: {} query heads are not a multiple of {} KV heads", nq, nkv);
  expect_shape(k, {T, nkv, d}, "attention", "k");
  expect_shape(v, {T, nkv, d}, "attention", "v");
  expect_shape(o, q.shape(), "attention", "o");
  expect_batch(batch, T, caches.size(), "attention");
  for (size_t s = 0; s < batch.size(); ++s) {
    PLUMB_CHECK(caches[s] != nullptr, "attention: sequence {} has no cache", s);
    PLUMB_CHECK(caches[s]->k.dtype() == DType::kF32, "attention: sequence {}'s cache is {}, expected F32", s,
                dtype_name(caches[s]->k.dtype()));
    check_kv_cache(*caches[s], nkv, d, batch[s].past + batch[s].count, s, "attention");
  }
  expect_unshared_written_pages(caches, batch, "attention");
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceRows& seq = batch[s];
    const KvCache& cache = *caches[s];
    // The pool row [nkv, d] of position p: slot p % kKvPageSize of page pages[p / kKvPageSize].
    auto pool_row = [&](int64_t p) { return cache.pages[p / kKvPageSize] * kKvPageSize + p % kKvPageSize; };
    for (int64_t t = 0; t < seq.count; ++t) {
      float* const new_k = cache.k.f32() + pool_row(seq.past + t) * nkv * d;  // [nkv, d]
      float* const new_v = cache.v.f32() + pool_row(seq.past + t) * nkv * d;  // [nkv, d]
      std::memcpy(new_k, k.f32() + (seq.begin + t) * nkv * d, static_cast<size_t>(nkv * d) * sizeof(float));
      std::memcpy(new_v, v.f32() + (seq.begin + t) * nkv * d, static_cast<size_t>(nkv * d) * sizeof(float));
      if (rounds_attention()) {
        cpu::round_to_bf16(new_k, nkv * d);
        cpu::round_to_bf16(new_v, nkv * d);
      }
    }
    const float *pq = q.f32() + seq.begin * nq * d, *pk = cache.k.f32(), *pv = cache.v.f32();
    float* po = o.f32() + seq.begin * nq * d;
    parallel_for(seq.count * nq, 4, [&](int64_t begin, int64_t end) {
      std::vector<float> scores, q_rounded;
      for (int64_t idx = begin; idx < end; ++idx) {
        const int64_t t = idx / nq, h = idx % nq, kvh = h / (nq / nkv), visible = seq.past + t + 1;
        const float* qv = pq + idx * d;
        if (rounds_attention()) {
          q_rounded.assign(qv, qv + d);
          cpu::round_to_bf16(q_rounded.data(), d);
          qv = q_rounded.data();
        }
        scores.resize(visible);
        float max_score = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          scores[j] = cpu::dot(qv, pk + (pool_row(j) * nkv + kvh) * d, d) * scale;
          max_score = std::max(max_score, scores[j]);
        }
        float sum = 0.0f;
        // The GPU rounds the unnormalized probabilities to BF16 (its P·V operand) and sums the rounded values.
        for (int64_t j = 0; j < visible; ++j) {
          const float p = std::exp(scores[j] - max_score);
          sum += scores[j] = rounds_attention() ? cpu::round_to_bf16(p) : p;
        }
        float* out = po + idx * d;
        std::fill(out, out + d, 0.0f);
        for (int64_t j = 0; j < visible; ++j) {
          const float p = scores[j] / sum;
          const float* vv = pv + (pool_row(j) * nkv + kvh) * d;
          for (int64_t c = 0; c < d; ++c) out[c] += p * vv[c];
        }
      }
    });
  }
}

}  // namespace plumb
