// The uniform random fill and the token sampler of the CPU reference: the definitions the GPU's are checked against.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/counter_rng.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/checks.h"

namespace plumb {

// Element i is fma(hi - lo, u, lo) with u = uniform_f32_from_counter(seed, i): one fused multiply-add, rounded once,
// which the GPU evaluates identically. A separate multiply and add would not reliably match, because compilers fuse
// them wherever the target has an FMA instruction (g++ does so across statements even under -std=c++20: always on
// aarch64, on x86 with -march=haswell or later; nvcc always).
void CpuBackend::random_uniform(Tensor& t, uint64_t seed, float lo, float hi) {
  PLUMB_CHECK(t.device() == Device::kCpu, "random_uniform: t is not a host tensor");
  const DType dtype = t.dtype();
  PLUMB_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF8E4M3,
              "random_uniform: t is {}, expected F32, BF16 or F8_E4M3", dtype_name(dtype));
  const float range = hi - lo;
  auto* f32 = t.data_as<float>();
  auto* bf16 = t.data_as<uint16_t>();
  auto* fp8 = t.data_as<uint8_t>();
  // Each element depends on its index alone, so the split across threads cannot change a bit.
  parallel_for(t.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float v = std::fma(range, uniform_f32_from_counter(seed, static_cast<uint64_t>(i)), lo);
      if (dtype == DType::kBF16)
        bf16[i] = f32_to_bf16(v);
      else if (dtype == DType::kF8E4M3)
        fp8[i] = f32_to_fp8_e4m3(v);
      else
        f32[i] = v;
    }
  });
}

// Per row, straightforwardly. Temperature 0: the first largest logit. Otherwise, with s = (l - max l) · (1 / T) in
// F32: sort the tokens by s, highest first, equal s to the lower id; keep the first top_k; weigh each by exp(s),
// summed in double in that order (the softmax numerators: dividing by their total would scale both sides of every
// comparison below alike); the nucleus is the shortest prefix whose weight reaches top_p times the kept weight; the
// pick is the first nucleus token at which the running weight exceeds u times the nucleus weight. A token the draw does
// not allow has its logit replaced by -inf first.
void CpuBackend::sample_tokens(const Tensor& logits, const std::vector<TokenDraw>& draws, Tensor& ids) {
  PLUMB_CHECK(logits.dtype() == DType::kF32 && logits.rank() == 2,
              "sample_tokens: logits are {} {}, expected F32 [rows, vocab]", dtype_name(logits.dtype()),
              shape_str(logits.shape()));
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  PLUMB_CHECK(static_cast<int64_t>(draws.size()) == rows, "sample_tokens: {} draws for {} rows", draws.size(), rows);
  PLUMB_CHECK(vocab >= 1 && vocab <= std::numeric_limits<int32_t>::max(),
              "sample_tokens: vocabulary of {} tokens, expected 1 to 2^31 - 1", vocab);
  PLUMB_CHECK(ids.dtype() == DType::kI32, "sample_tokens: ids are {}, expected I32", dtype_name(ids.dtype()));
  expect_shape(ids, {rows}, "sample_tokens", "ids");
  for (int64_t r = 0; r < rows; ++r) check_token_draw(draws[r], r, vocab);

  std::vector<float> s(vocab), masked;
  if (std::any_of(draws.begin(), draws.end(), [](const TokenDraw& d) { return d.allowed != nullptr; }))
    masked.resize(static_cast<size_t>(vocab));
  std::vector<int32_t> order(vocab);
  std::vector<double> running;
  for (int64_t r = 0; r < rows; ++r) {
    const TokenDraw& d = draws[r];
    const float* l = logits.f32() + r * vocab;  // [vocab]
    if (d.allowed != nullptr) {
      for (int64_t i = 0; i < vocab; ++i)
        masked[i] = token_allowed(d.allowed, i) ? l[i] : -std::numeric_limits<float>::infinity();
      l = masked.data();
    }
    int32_t& id = ids.data_as<int32_t>()[r];
    if (d.temperature == 0.0f) {
      int64_t best = 0;
      for (int64_t i = 1; i < vocab; ++i)
        if (l[i] > l[best]) best = i;
      id = static_cast<int32_t>(best);
      continue;
    }
    const float max_logit = *std::max_element(l, l + vocab);
    const float inv_temperature = 1.0f / d.temperature;
    for (int64_t i = 0; i < vocab; ++i) s[i] = (l[i] - max_logit) * inv_temperature;
    std::iota(order.begin(), order.end(), 0);
    const int64_t kept = d.top_k > 0 && d.top_k < vocab ? d.top_k : vocab;
    std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                      [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });

    running.resize(static_cast<size_t>(kept));
    double sum = 0.0;
    for (int64_t j = 0; j < kept; ++j) running[j] = sum += std::exp(s[order[j]]);
    int64_t nucleus = kept;
    if (d.top_p < 1.0f) {
      const double target = static_cast<double>(d.top_p) * running[kept - 1];
      nucleus = std::lower_bound(running.begin(), running.end(), target) - running.begin() + 1;
    }
    const double threshold = static_cast<double>(uniform_f32_from_counter(d.seed, d.step)) * running[nucleus - 1];
    const int64_t pick = std::upper_bound(running.begin(), running.begin() + nucleus, threshold) - running.begin();
    id = order[std::min(pick, nucleus - 1)];
  }
}

}  // namespace plumb
