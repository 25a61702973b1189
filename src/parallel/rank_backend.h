// One rank's backend in a model split over ranks: the rank's own device backend with the places where the ranks meet
// laid over it, as gpt-fast's tp.py lays its all-reduce over a finished model's output projections. The model's
// forward pass (model/qwen3_next.h) runs unchanged on one rank's share of the weights (model_shard.h); the weights
// bound here change what three ops do:
// - linear with a row-parallel weight (an output projection over this rank's heads or MLP width): the product over
//   this rank's columns, reduced over the ranks (row_parallel_linear, kExact or kSum);
// - embedding and linear with this rank's vocabulary rows (the embedding and lm_head): the rows of other ranks' ids
//   come from them, and the logits of every rank's rows are gathered in rank order;
// - moe_experts with this rank's experts (expert parallel): each rank runs the (token, slot) pairs routed to its
//   experts, the pairs' products are gathered, and every rank combines each token's slots in slot order, as
//   moe_experts does.
// Every other op is the inner backend's. Each of the three gives every rank the unsplit model's bits, the kSum
// reduction excepted. A weight is known by its storage address: bind it as the model holds it.
#pragma once

#include <map>
#include <memory>

#include "ops/forwarding_backend.h"
#include "parallel/collective.h"
#include "parallel/row_parallel.h"

namespace plumb::parallel {

class RankBackend final : public ForwardingBackend {
 public:
  // `inner` and `collective` must outlive this backend.
  RankBackend(Backend& inner, Collective& collective) : ForwardingBackend(inner), collective_(collective) {}

  Collective& collective() const { return collective_; }

  // w [N, K_r]: this rank's columns of a row-parallel weight, as the model holds it, and the rank's shard of the
  // whole weight (shard_row_parallel), which the product reads.
  void bind_row_parallel(const Tensor& w, RowParallelShard shard);
  // table [end - begin, H]: rows [begin, end) of an embedding or output head of `vocab` rows (one tensor when tied).
  void bind_vocabulary_rows(const Tensor& table, ColumnRange rows, int64_t vocab);
  // experts: experts [begin, end) of an MoE layer's `count`; moe_experts calls with these weights take global ids.
  void bind_experts(const ExpertWeights& experts, ColumnRange ids, int64_t count);

  // A split step is not recorded: the expert exchange and the embedding's gather read ids on the host. The step runs
  // as usual and nullptr comes back.
  std::unique_ptr<StepGraph> record_step(int64_t max_kv_pages, const std::function<void()>& step) override;
  void replay_step(StepGraph& graph, const std::function<void()>& step) override;
  // One after the other, whatever the inner backend does: every rank must meet in its collectives in one order.
  void concurrently(const std::function<void()>& first, const std::function<void()>& second) override {
    first();
    second();
  }
  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override;
  // The ids read on the host first, where the vocabulary split needs them (a split step waits for the device anyway).
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& w, Tensor& y) override;
  void linear_parts(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) override;
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                   const ExpertWeights& experts, Tensor& y) override;

 private:
  struct VocabularyRows {
    ColumnRange rows;
    int64_t vocab = 0;
  };
  // Throws if w is bound (it must not meet an op that does not know its role).
  void expect_unbound(const Tensor& w, const char* op) const;

  Collective& collective_;
  std::map<const void*, RowParallelShard> row_parallel_;
  std::map<const void*, VocabularyRows> vocabulary_;
  struct ExpertShare {
    ColumnRange ids;
    int64_t count = 0;
  };
  std::map<const void*, ExpertShare> experts_;  // by the gate_up weights' address
};

}  // namespace plumb::parallel
