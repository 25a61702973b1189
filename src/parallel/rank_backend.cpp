// rank_backend.h. The embedding and the experts gather what other ranks hold with all_reduce_sum over tensors in
// which each rank writes only its own rows and -0 elsewhere: -0 is the one value whose sum with any x is x (+0 + -0
// is +0, and -0 + -0 is -0), so the rank-order sum is an exact gather.
#include "parallel/rank_backend.h"

#include "core/error.h"
#include "ops/checks.h"

namespace plumb::parallel {
namespace {

// A host F32 tensor of `shape` holding -0 everywhere.
Tensor negative_zeros(const Shape& shape) {
  Tensor t = Tensor::zeros(DType::kF32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = -0.0f;
  return t;
}

}  // namespace

std::unique_ptr<StepGraph> RankBackend::record_step(int64_t, const std::function<void()>& step) {
  step();
  return nullptr;
}

void RankBackend::replay_step(StepGraph&, const std::function<void()>&) {
  PLUMB_FAIL("replay_step: a rank of a split model records no step graph");
}

void RankBackend::bind_row_parallel(const Tensor& w, RowParallelShard shard) {
  const ColumnRange columns = shard.columns();
  PLUMB_CHECK(w.rank() == 2 && w.dim(1) == columns.end - columns.begin &&
                  (shard.slices.empty() || shard.slices[0].dim(0) == w.dim(0)),
              "bind_row_parallel: a weight {} as columns {} to {}", shape_str(w.shape()), columns.begin, columns.end);
  row_parallel_[w.data()] = std::move(shard);
}

void RankBackend::bind_vocabulary_rows(const Tensor& table, ColumnRange rows, int64_t vocab) {
  PLUMB_CHECK(table.rank() == 2 && table.dim(0) == rows.end - rows.begin && rows.begin >= 0 && rows.end <= vocab,
              "bind_vocabulary_rows: a table {} as rows {} to {} of {}", shape_str(table.shape()), rows.begin, rows.end,
              vocab);
  vocabulary_[table.data()] = VocabularyRows{rows, vocab};
}

void RankBackend::bind_experts(const ExpertWeights& experts, ColumnRange ids, int64_t count) {
  PLUMB_CHECK(experts.gate_up.rank() == 3 && experts.gate_up.dim(0) == ids.end - ids.begin && ids.begin >= 0 &&
                  ids.end <= count,
              "bind_experts: gate_up {} as experts {} to {} of {}", shape_str(experts.gate_up.shape()), ids.begin,
              ids.end, count);
  experts_[experts.gate_up.data()] = ExpertShare{ids, count};
}

void RankBackend::expect_unbound(const Tensor& w, const char* op) const {
  PLUMB_CHECK(!row_parallel_.count(w.data()) && !vocabulary_.count(w.data()),
              "{}: a weight {} bound to this rank's split reaches an op that does not split it", op,
              shape_str(w.shape()));
}

void RankBackend::linear(const Tensor& x, const Tensor& w, Tensor& y) {
  if (auto shard = row_parallel_.find(w.data()); shard != row_parallel_.end()) {
    row_parallel_linear(inner(), collective_, x, shard->second, y);
    return;
  }
  if (auto vocab = vocabulary_.find(w.data()); vocab != vocabulary_.end()) {
    PLUMB_CHECK(y.rank() == 2 && y.dim(1) == vocab->second.vocab,
                "linear: logits {} from rows {} to {} of a vocabulary of {}", shape_str(y.shape()),
                vocab->second.rows.begin, vocab->second.rows.end, vocab->second.vocab);
    vocab_parallel_logits(inner(), collective_, x, w, y);
    return;
  }
  inner().linear(x, w, y);
}

void RankBackend::linear_parts(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) {
  for (const Tensor* w : ws) expect_unbound(*w, "linear_parts");
  inner().linear_parts(x, ws, ys);
}

void RankBackend::embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) {
  const auto found = vocabulary_.find(table.data());
  if (found == vocabulary_.end()) {
    inner().embedding(table, ids, out);
    return;
  }
  const auto [rows, vocab] = found->second;
  // Other ranks' ids take this rank's row 0, then -0 in place of it.
  std::vector<int32_t> local(ids.size());
  for (size_t t = 0; t < ids.size(); ++t) {
    PLUMB_CHECK(ids[t] >= 0 && ids[t] < vocab, "embedding: token id {} outside the vocabulary of {}", ids[t], vocab);
    local[t] = ids[t] >= rows.begin && ids[t] < rows.end ? static_cast<int32_t>(ids[t] - rows.begin) : 0;
  }
  inner().embedding(table, local, out);
  Tensor mine = inner().download(out);  // [T, H]
  const int64_t H = mine.dim(1);
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] < rows.begin || ids[t] >= rows.end)
      for (int64_t h = 0; h < H; ++h) mine.f32()[static_cast<int64_t>(t) * H + h] = -0.0f;
  inner().copy(inner().upload(mine), out);
  collective_.all_reduce_sum(out);
}

void RankBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  embedding(table, host_token_ids(inner().download(ids), "embedding"), out);
}

void RankBackend::moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                              const ExpertWeights& experts, Tensor& y) {
  const auto found = experts_.find(experts.gate_up.data());
  if (found == experts_.end()) {
    inner().moe_experts(x, expert_ids, expert_weights, experts, y);
    return;
  }
  const ColumnRange mine = found->second.ids;
  const Tensor ids = inner().download(expert_ids);          // [T, top_k]
  const Tensor weights = inner().download(expert_weights);  // [T, top_k]
  const Tensor x_host = inner().download(x);                // [T, H]
  const int64_t T = x.dim(0), H = x.dim(1), top_k = ids.dim(1);
  // This rank's pairs p = t·top_k + j, each as a token of its own routed to its one expert with weight 1: the
  // expert's product times 1, added to +0, is the product itself (a -0 product comes back +0, which the combine
  // below, starting from +0, cannot tell apart).
  std::vector<int64_t> pairs;
  for (int64_t p = 0; p < T * top_k; ++p) {
    const int32_t e = ids.data_as<int32_t>()[p];
    // As moe_experts refuses it unsplit: no rank holds such an expert, and every rank sees the same ids.
    PLUMB_CHECK(e >= 0 && e < found->second.count, "moe_experts: token {} slot {} has expert id {}, outside [0, {})",
                p / top_k, p % top_k, e, found->second.count);
    if (e >= mine.begin && e < mine.end) pairs.push_back(p);
  }
  Tensor products = negative_zeros({T * top_k, H});  // [T·top_k, H]: each pair's expert product, -0 for others'
  if (!pairs.empty()) {
    const auto R = static_cast<int64_t>(pairs.size());
    Tensor rows = Tensor::zeros(DType::kF32, {R, H});                     // [R, H]
    Tensor local_ids = Tensor::zeros(DType::kI32, {R, 1});                // [R, 1]
    Tensor ones = Tensor::from_f32(std::vector<float>(R, 1.0f), {R, 1});  // [R, 1]
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = pairs[r] / top_k;
      for (int64_t h = 0; h < H; ++h) rows.f32()[r * H + h] = x_host.f32()[t * H + h];
      local_ids.data_as<int32_t>()[r] = static_cast<int32_t>(ids.data_as<int32_t>()[pairs[r]] - mine.begin);
    }
    Tensor out = inner().empty(DType::kF32, {R, H});  // [R, H]
    inner().moe_experts(inner().upload(rows), inner().upload(local_ids), inner().upload(ones), experts, out);
    const Tensor got = inner().download(out);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h) products.f32()[pairs[r] * H + h] = got.f32()[r * H + h];
  }
  Tensor gathered = inner().upload(products);
  collective_.all_reduce_sum(gathered);
  const Tensor all = inner().download(gathered);
  // moe_experts' combine: from +0, each slot's weight times its product (rounded), added in slot order.
  Tensor combined = Tensor::zeros(DType::kF32, {T, H});  // [T, H]
  for (int64_t t = 0; t < T; ++t) {
    float* out = combined.f32() + t * H;
    for (int64_t j = 0; j < top_k; ++j) {
      const float w = weights.f32()[t * top_k + j];
      const float* product = all.f32() + (t * top_k + j) * H;
      for (int64_t h = 0; h < H; ++h) {
        const float scaled = w * product[h];
        out[h] = out[h] + scaled;
      }
    }
  }
  inner().copy(inner().upload(combined), y);
}

}  // namespace plumb::parallel
