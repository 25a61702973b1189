// A backend that passes every op to another one: the base of a backend that changes a few ops of another and keeps
// the rest (a rank of a split model, parallel/rank_backend.h; a test's backend that fails on cue).
#pragma once

#include <memory>
#include <vector>

#include "ops/backend.h"

namespace plumb {

class ForwardingBackend : public Backend {
 public:
  // `inner` must outlive this backend; it may be a member of the derived class (only its address is kept here).
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}

  Device device() const override { return inner_.device(); }
  DType kv_dtype() const override { return inner_.kv_dtype(); }
  void synchronize() override { inner_.synchronize(); }
  int64_t kernel_launches() const override { return inner_.kernel_launches(); }
  std::unique_ptr<StepGraph> record_step(int64_t max_kv_pages, const std::function<void()>& step) override {
    return inner_.record_step(max_kv_pages, step);
  }
  void replay_step(StepGraph& graph, const std::function<void()>& step) override { inner_.replay_step(graph, step); }
  void concurrently(const std::function<void()>& first, const std::function<void()>& second) override {
    inner_.concurrently(first, second);
  }
  void release_cached_memory() override { inner_.release_cached_memory(); }
  MemoryInfo memory_info() const override { return inner_.memory_info(); }

  Tensor zeros(DType dtype, const Shape& shape) override { return inner_.zeros(dtype, shape); }
  Tensor empty(DType dtype, const Shape& shape) override { return inner_.empty(dtype, shape); }
  Tensor upload(const Tensor& host) override { return inner_.upload(host); }
  Tensor download(const Tensor& t) override { return inner_.download(t); }
  void copy(const Tensor& src, Tensor& dst) override { inner_.copy(src, dst); }
  void copy_all(const std::vector<Tensor>& srcs, std::vector<Tensor>& dsts) override { inner_.copy_all(srcs, dsts); }
  void random_uniform(Tensor& t, uint64_t seed, float lo, float hi) override { inner_.random_uniform(t, seed, lo, hi); }

  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override {
    inner_.embedding(table, ids, out);
  }
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override { inner_.embedding(table, ids, out); }
  void linear(const Tensor& x, const Tensor& w, Tensor& y) override { inner_.linear(x, w, y); }
  void linear_parts(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) override {
    inner_.linear_parts(x, ws, ys);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight kind, Tensor& y) override {
    inner_.rms_norm(x, w, eps, kind, y);
  }
  void add_rms_norm(Tensor& x, const Tensor& r, const Tensor& w, float eps, NormWeight kind, Tensor& y) override {
    inner_.add_rms_norm(x, r, w, eps, kind, y);
  }
  void add_gated_branch_rms_norm(Tensor& x, const Tensor& r, const GatedBranch& branch, const Tensor& w, float eps,
                                 NormWeight kind, Tensor& y) override {
    inner_.add_gated_branch_rms_norm(x, r, branch, w, eps, kind, y);
  }
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) override {
    inner_.gated_rms_norm(x, z, w, eps, y);
  }
  void slice_columns(const Tensor& src, int64_t begin, int64_t end, Tensor& dst) override {
    inner_.slice_columns(src, begin, end, dst);
  }
  void causal_conv1d_silu(const Tensor& x, const Tensor& w, const std::vector<Tensor*>& states, const BatchRows& batch,
                          Tensor& y, const StateTrails& trails) override {
    inner_.causal_conv1d_silu(x, w, states, batch, y, trails);
  }
  void gated_delta_rule(const Tensor& qkv, int64_t key_heads, const Tensor& a, const Tensor& b, const Tensor& A_log,
                        const Tensor& dt_bias, const std::vector<Tensor*>& states, const BatchRows& batch, Tensor& o,
                        GdnAlgorithm algorithm, const StateTrails& trails) override {
    inner_.gated_delta_rule(qkv, key_heads, a, b, A_log, dt_bias, states, batch, o, algorithm, trails);
  }
  void rotary_embedding(Tensor& x, const std::vector<int64_t>& positions, int64_t rotary_dim, double theta) override {
    inner_.rotary_embedding(x, positions, rotary_dim, theta);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<KvCache*>& caches,
                 const BatchRows& batch, Tensor& o, GdnAlgorithm rule) override {
    inner_.attention(q, k, v, caches, batch, o, rule);
  }
  void mul_sigmoid(Tensor& x, const Tensor& gate) override { inner_.mul_sigmoid(x, gate); }
  void mul_sigmoid_rows(Tensor& x, const Tensor& gate) override { inner_.mul_sigmoid_rows(x, gate); }
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override { inner_.silu_mul(gate, up, out); }
  void add(Tensor& x, const Tensor& y) override { inner_.add(x, y); }
  void moe_route(const Tensor& logits, int64_t top_k, bool renormalize, Tensor& expert_ids,
                 Tensor& expert_weights) override {
    inner_.moe_route(logits, top_k, renormalize, expert_ids, expert_weights);
  }
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                   const ExpertWeights& experts, Tensor& y) override {
    inner_.moe_experts(x, expert_ids, expert_weights, experts, y);
  }
  void sample_tokens(const Tensor& logits, const std::vector<TokenDraw>& draws, Tensor& ids) override {
    inner_.sample_tokens(logits, draws, ids);
  }

 protected:
  Backend& inner() const { return inner_; }

 private:
  Backend& inner_;
};

}  // namespace plumb
