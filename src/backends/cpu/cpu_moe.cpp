// Mixture-of-experts routing and the routed experts on the CPU.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/parallel.h"

namespace plumb {

void CpuBackend::moe_route(const Tensor& logits, int64_t top_k, bool renormalize, Tensor& expert_ids,
                           Tensor& expert_weights) {
  const int64_t T = logits.dim(0), E = logits.dim(1);
  PLUMB_CHECK(top_k >= 1 && top_k <= E, "moe_route: top_k {} for {} experts", top_k, E);
  PLUMB_CHECK(expert_ids.dtype() == DType::kI32, "moe_route: expert_ids must be I32");
  expect_shape(expert_ids, {T, top_k}, "moe_route", "expert_ids");
  expect_shape(expert_weights, {T, top_k}, "moe_route", "expert_weights");
  std::vector<float> p(E);
  std::vector<int32_t> order(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits.f32() + t * E;
    const float max_logit = *std::max_element(row, row + E);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(row[e] - max_logit);
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    // Highest probability first; equal probabilities go to the lower expert id.
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float kept = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) kept += p[order[j]];
    for (int64_t j = 0; j < top_k; ++j) {
      expert_ids.data_as<int32_t>()[t * top_k + j] = order[j];
      expert_weights.f32()[t * top_k + j] = renormalize ? p[order[j]] / kept : p[order[j]];
    }
  }
}

void CpuBackend::moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                             const ExpertWeights& experts, Tensor& y) {
  const int64_t T = x.dim(0), H = x.dim(1), top_k = expert_ids.dim(1);
  const int64_t E = experts.gate_up.dim(0), inter = experts.down.dim(2);
  expect_shape(experts.gate_up, {E, 2 * inter, H}, "moe_experts", "gate_up");
  expect_shape(experts.down, {E, H, inter}, "moe_experts", "down");
  expect_shape(expert_weights, {T, top_k}, "moe_experts", "expert_weights");
  expect_shape(y, {T, H}, "moe_experts", "y");
  for (int64_t p = 0; p < T * top_k; ++p) {
    const int32_t e = expert_ids.data_as<int32_t>()[p];
    PLUMB_CHECK(e >= 0 && e < E, "moe_experts: token {} slot {} has expert id {}, outside [0, {})", p / top_k,
                p % top_k, e, E);
  }
  const bool round_gate_up = rounds_operand_of(experts.gate_up), round_down = rounds_operand_of(experts.down);
  parallel_for(T, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch, gate, up, act, x_rounded;
    for (int64_t t = begin; t < end; ++t) {
      const float* xt = x.f32() + t * H;
      if (round_gate_up) {
        x_rounded.assign(xt, xt + H);
        cpu::round_to_bf16(x_rounded.data(), H);
        xt = x_rounded.data();
      }
      float* yt = y.f32() + t * H;
      std::fill(yt, yt + H, 0.0f);
      for (int64_t j = 0; j < top_k; ++j) {
        const int32_t e = expert_ids.data_as<int32_t>()[t * top_k + j];
        const float w = expert_weights.f32()[t * top_k + j];
        const Tensor gate_up = experts.gate_up.rows(e, e + 1).reshape({2 * inter, H});
        const Tensor wg = gate_up.rows(0, inter), wu = gate_up.rows(inter, 2 * inter);
        const Tensor wd = experts.down.rows(e, e + 1).reshape({H, inter});
        gate.resize(inter);
        up.resize(inter);
        act.resize(inter);
        for (int64_t i = 0; i < inter; ++i) gate[i] = cpu::sliced_dot(xt, cpu::weight_row(wg, i, scratch), H);
        for (int64_t i = 0; i < inter; ++i) up[i] = cpu::sliced_dot(xt, cpu::weight_row(wu, i, scratch), H);
        for (int64_t i = 0; i < inter; ++i) act[i] = cpu::silu(gate[i]) * up[i];
        if (round_down) cpu::round_to_bf16(act.data(), inter);
        for (int64_t n = 0; n < H; ++n)
          yt[n] += w * cpu::sliced_dot(act.data(), cpu::weight_row(wd, n, scratch), inter);
      }
    }
  });
}

}  // namespace plumb
