// The CPU backend: plain loops with FP32 accumulation, written to be read. It is the reference ("oracle") every
// other backend is checked against, so clarity wins over speed; work is split across host threads only where the
// split cannot change a result (each output element is computed by exactly one thread, in a fixed order).
#pragma once

#include <cmath>
#include <memory>

#include "ops/backend.h"
#include "ops/checks.h"

namespace plumb {

// Which operands the CPU reference rounds. kF32 is the reference proper: every value stays F32. kBf16Operands rounds
// to BF16 (nearest even) exactly the operands the CUDA backend rounds for its tensor cores — the activation of every
// product with BF16 or FP8 weights (linear, both expert products), attention's queries, cached keys and values, and its
// unnormalized probabilities — and keeps everything else F32. It separates the error the GPU's specified BF16
// arithmetic causes (which a model can amplify far beyond a per-op bound) from the error of its kernels
// (tools/gpu_end_to_end.py, docs/kernel-contract.md "End to end").
enum class CpuRounding {
  kF32,
  kBf16Operands,
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuRounding rounding = CpuRounding::kF32) : rounding_(rounding) {}
  CpuRounding rounding() const { return rounding_; }

  Device device() const override { return Device::kCpu; }
  DType kv_dtype() const override { return DType::kF32; }
  void synchronize() override {}
  int64_t kernel_launches() const override { return 0; }
  void release_cached_memory() override {}
  MemoryInfo memory_info() const override;
  void concurrently(const std::function<void()>& first, const std::function<void()>& second) override {
    first();
    second();
  }
  // Plain loops record nothing: the step runs as usual and nullptr comes back.
  std::unique_ptr<StepGraph> record_step(int64_t max_kv_pages, const std::function<void()>& step) override;
  void replay_step(StepGraph& graph, const std::function<void()>& step) override;

  Tensor zeros(DType dtype, const Shape& shape) override;
  Tensor empty(DType dtype, const Shape& shape) override { return zeros(dtype, shape); }
  Tensor upload(const Tensor& host) override;
  Tensor download(const Tensor& t) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void random_uniform(Tensor& t, uint64_t seed, float lo, float hi) override;

  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override;
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& w, Tensor& y) override;
  void linear_parts(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight kind, Tensor& y) override;
  void add_rms_norm(Tensor& x, const Tensor& r, const Tensor& w, float eps, NormWeight kind, Tensor& y) override;
  void add_gated_branch_rms_norm(Tensor& x, const Tensor& r, const GatedBranch& branch, const Tensor& w, float eps,
                                 NormWeight kind, Tensor& y) override;
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) override;
  void slice_columns(const Tensor& src, int64_t begin, int64_t end, Tensor& dst) override;

  void causal_conv1d_silu(const Tensor& x, const Tensor& w, const std::vector<Tensor*>& states, const BatchRows& batch,
                          Tensor& y, const StateTrails& trails = {}) override;
  void gated_delta_rule(const Tensor& qkv, int64_t key_heads, const Tensor& a, const Tensor& b, const Tensor& A_log,
                        const Tensor& dt_bias, const std::vector<Tensor*>& states, const BatchRows& batch, Tensor& o,
                        GdnAlgorithm algorithm, const StateTrails& trails = {}) override;

  void rotary_embedding(Tensor& x, const std::vector<int64_t>& positions, int64_t rotary_dim, double theta) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<KvCache*>& caches,
                 const BatchRows& batch, Tensor& o, GdnAlgorithm rule) override;

  void mul_sigmoid(Tensor& x, const Tensor& gate) override;
  void mul_sigmoid_rows(Tensor& x, const Tensor& gate) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void add(Tensor& x, const Tensor& y) override;

  void moe_route(const Tensor& logits, int64_t top_k, bool renormalize, Tensor& expert_ids,
                 Tensor& expert_weights) override;
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                   const ExpertWeights& experts, Tensor& y) override;
  void sample_tokens(const Tensor& logits, const std::vector<TokenDraw>& draws, Tensor& ids) override;

 private:
  // Whether the activation operand of a product with weights w is rounded to BF16 (CpuRounding::kBf16Operands).
  bool rounds_operand_of(const Tensor& w) const {
    return rounding_ == CpuRounding::kBf16Operands && (w.dtype() == DType::kBF16 || w.dtype() == DType::kF8E4M3);
  }
  bool rounds_attention() const { return rounding_ == CpuRounding::kBf16Operands; }

  CpuRounding rounding_;
};

// Shared scalar helpers of the CPU reference.
namespace cpu {

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
// log(1 + e^x), passing x through above 20 as torch.nn.functional.softplus does.
inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// Σ a[i]·b[i] in FP32 with eight interleaved partial sums combined in a fixed order.
float dot(const float* a, const float* b, int64_t n);
// The matrix products' dot (kernels/linear.h, docs/kernel-contract.md "Fixed K-slices"): dot over each 128-wide slice
// of [0, n), the slices' sums added in slice order. The GPU's F32-weight kernel computes exactly this.
float sliced_dot(const float* a, const float* b, int64_t n);
// x rounded to BF16 (nearest even) and back.
float round_to_bf16(float x);
// v[0, n) rounded to BF16 and back, in place.
void round_to_bf16(float* v, int64_t n);
// Row n of a weight matrix [N, K] as F32: a pointer into w when it is F32, else converted into scratch (an FP8
// weight's codes times its block scales).
const float* weight_row(const Tensor& w, int64_t n, std::vector<float>& scratch);

}  // namespace cpu
}  // namespace plumb
