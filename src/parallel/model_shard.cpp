// model_shard.h.
#include "parallel/model_shard.h"

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/weight_table.h"

namespace plumb::parallel {
namespace {

ColumnRange scaled(ColumnRange r, int64_t by) {
  return {r.begin * by, r.end * by};
}

ColumnRange shifted(ColumnRange r, int64_t by) {
  return {r.begin + by, r.end + by};
}

int64_t size_of(ColumnRange r) {
  return r.end - r.begin;
}

// The rows of `ranges`, in order, of a host tensor as a new one.
Tensor rows_of(const Tensor& w, std::initializer_list<ColumnRange> ranges) {
  std::vector<int64_t> order;
  for (const ColumnRange& r : ranges)
    for (int64_t i = r.begin; i < r.end; ++i) order.push_back(i);
  return gather_rows(w, order);
}

// A rank's heads of a block whose heads read shared ones in groups (query heads their KV head, value heads their key
// head): the heads split evenly, and the groups those heads read, split where there are at least as many groups as
// ranks and one kept by each rank where there are fewer.
struct HeadShare {
  ColumnRange heads;
  ColumnRange groups;
};

HeadShare head_share(const char* what, const char* group_what, int64_t heads, int64_t groups, int rank, int world) {
  PLUMB_CHECK(heads % world == 0, "tensor parallel: the {} {} heads do not split evenly over {} ranks", heads, what,
              world);
  PLUMB_CHECK(groups % world == 0 || world % groups == 0,
              "tensor parallel: the {} {} heads split over {} ranks neither evenly nor as copies (the ranks are not a "
              "multiple of them)",
              groups, group_what, world);
  const int64_t per_group = heads / groups;
  const ColumnRange mine = even_share(heads, rank, world);
  return {mine, {mine.begin / per_group, (mine.end - 1) / per_group + 1}};
}

struct Split {
  const ModelConfig& config;  // the whole model's
  int rank = 0;
  int world = 1;
  RowReduction reduction = RowReduction::kExact;
  HeadShare attention;
  HeadShare gdn;
  ColumnRange experts;
  std::vector<RowParallelShard>* row_parallel = nullptr;  // ModelShare::row_parallel, appended in order

  // The model's tensor for a row-parallel weight split as `split`, [N, this rank's columns]: the weights themselves
  // for the sum; for the exact reduction, which reads whole slices from the shard, a tensor of that shape that only
  // names the product (zeros: a rank's columns may cut an FP8 weight's scale slices). The shard is kept for binding.
  Tensor row_parallel_columns_of(const Tensor& w, const ColumnSplit& split) const {
    row_parallel->push_back(shard_row_parallel(w, reduction, split, rank));
    const RowParallelShard& shard = row_parallel->back();
    if (reduction == RowReduction::kSum) return shard.whole;
    return Tensor::zeros(w.dtype(), {w.dim(0), shard.columns().end - shard.columns().begin});
  }
};

GdnWeights shard_gdn(const GdnWeights& w, const Split& s) {
  const ModelConfig& c = s.config;
  const int64_t key_dim = c.key_dim();
  const ColumnRange q = scaled(s.gdn.groups, c.linear_key_head_dim), k = shifted(q, key_dim);
  const ColumnRange out = scaled(s.gdn.heads, c.linear_value_head_dim), v = shifted(out, 2 * key_dim);
  GdnWeights r;
  r.in_proj_qkv = rows_of(w.in_proj_qkv, {q, k, v});  // the conv channels' order: this rank's q | k | v
  r.conv1d = rows_of(w.conv1d, {q, k, v});
  r.in_proj_z = rows_of(w.in_proj_z, {out});
  r.in_proj_b = rows_of(w.in_proj_b, {s.gdn.heads});
  r.in_proj_a = rows_of(w.in_proj_a, {s.gdn.heads});
  r.A_log = rows_of(w.A_log, {s.gdn.heads});
  r.dt_bias = rows_of(w.dt_bias, {s.gdn.heads});
  r.norm = w.norm;
  r.out_proj =
      s.row_parallel_columns_of(w.out_proj, head_split(c.linear_num_value_heads, c.linear_value_head_dim, s.world));
  return r;
}

AttentionWeights shard_attention(const AttentionWeights& w, const Split& s) {
  const ModelConfig& c = s.config;
  const int64_t d = c.head_dim, q_rows = c.attn_output_gate ? 2 * d : d;  // q_proj's rows a head
  AttentionWeights r;
  r.q_proj = rows_of(w.q_proj, {scaled(s.attention.heads, q_rows)});
  r.k_proj = rows_of(w.k_proj, {scaled(s.attention.groups, d)});
  r.v_proj = rows_of(w.v_proj, {scaled(s.attention.groups, d)});
  r.o_proj = s.row_parallel_columns_of(w.o_proj, head_split(c.num_attention_heads, d, s.world));
  r.q_norm = w.q_norm;
  r.k_norm = w.k_norm;
  return r;
}

MlpWeights shard_mlp(const MlpWeights& w, const Split& s) {
  const ColumnSplit split = row_parallel_split(w.gate_proj.dim(0), s.world);
  const ColumnRange width = split[static_cast<size_t>(s.rank)];
  return {rows_of(w.gate_proj, {width}), rows_of(w.up_proj, {width}), s.row_parallel_columns_of(w.down_proj, split)};
}

LayerWeights shard_layer(const LayerWeights& w, const Split& s) {
  LayerWeights r;
  r.kind = w.kind;
  r.mlp_kind = w.mlp_kind;
  r.input_norm = w.input_norm;
  r.post_attn_norm = w.post_attn_norm;
  if (w.kind == LayerKind::kGatedDeltaNet)
    r.gdn = shard_gdn(w.gdn, s);
  else
    r.attn = shard_attention(w.attn, s);
  if (w.mlp_kind == MlpKind::kDense) {
    r.mlp = shard_mlp(w.mlp, s);
    return r;
  }
  r.moe.router = w.moe.router;
  r.moe.experts.gate_up = rows_of(w.moe.experts.gate_up, {s.experts});
  r.moe.experts.down = rows_of(w.moe.experts.down, {s.experts});
  r.moe.has_shared_expert = w.moe.has_shared_expert;
  if (w.moe.has_shared_expert) {
    r.moe.shared_expert = shard_mlp(w.moe.shared_expert, s);
    r.moe.shared_expert_gate = w.moe.shared_expert_gate;
  }
  return r;
}

// Binds a layer's row-parallel products (taking their shards from `next` on, in shard_layer's order) and experts.
void bind_layer(const LayerWeights& w, ModelShare& share, size_t& next, RankBackend& backend) {
  const auto bind = [&](const Tensor& weight) {
    PLUMB_CHECK(next < share.row_parallel.size(), "tensor parallel: more row-parallel weights than shards");
    backend.bind_row_parallel(weight, std::move(share.row_parallel[next++]));
  };
  bind(w.kind == LayerKind::kGatedDeltaNet ? w.gdn.out_proj : w.attn.o_proj);
  if (w.mlp_kind == MlpKind::kDense) {
    bind(w.mlp.down_proj);
    return;
  }
  backend.bind_experts(w.moe.experts, share.experts, share.config.num_experts);
  if (w.moe.has_shared_expert) bind(w.moe.shared_expert.down_proj);
}

}  // namespace

SplitPlan plan_split(const ModelConfig& config, int rank, int world) {
  PLUMB_CHECK(world >= 1 && rank >= 0 && rank < world, "tensor parallel: rank {} of a world of {}", rank, world);
  const HeadShare attention =
      head_share("attention query", "KV", config.num_attention_heads, config.num_key_value_heads, rank, world);
  const HeadShare gdn =
      head_share("GDN value", "GDN key", config.linear_num_value_heads, config.linear_num_key_heads, rank, world);
  SplitPlan plan;
  plan.attention_heads = attention.heads;
  plan.kv_heads = attention.groups;
  plan.value_heads = gdn.heads;
  plan.key_heads = gdn.groups;
  if (config.num_experts > 0) {
    PLUMB_CHECK(config.num_experts >= world, "tensor parallel: {} experts split over {} ranks leave a rank none",
                config.num_experts, world);
    plan.experts = even_share(config.num_experts, rank, world);
  }
  plan.vocabulary = vocab_rows(config.vocab_size, rank, world);
  ModelConfig& c = plan.config;
  c = config;
  c.num_attention_heads = size_of(attention.heads);
  c.num_key_value_heads = size_of(attention.groups);
  c.linear_num_value_heads = size_of(gdn.heads);
  c.linear_num_key_heads = size_of(gdn.groups);
  const auto has = [&](MlpKind kind) {
    return std::find(config.mlp_kinds.begin(), config.mlp_kinds.end(), kind) != config.mlp_kinds.end();
  };
  if (has(MlpKind::kDense)) c.intermediate_size = size_of(row_parallel_columns(config.intermediate_size, rank, world));
  if (has(MlpKind::kMoe) && config.shared_expert_intermediate_size > 0)
    c.shared_expert_intermediate_size =
        size_of(row_parallel_columns(config.shared_expert_intermediate_size, rank, world));
  return plan;
}

ModelShare shard_model(const ModelConfig& config, const ModelWeights& weights, int rank, int world,
                       RowReduction reduction) {
  const SplitPlan plan = plan_split(config, rank, world);
  PLUMB_CHECK(weights.embed_tokens.device() == Device::kCpu,
              "tensor parallel: the model to split is on the GPU; a split starts from host weights");
  ModelShare share;
  Split s{config,
          rank,
          world,
          reduction,
          {plan.attention_heads, plan.kv_heads},
          {plan.value_heads, plan.key_heads},
          plan.experts,
          &share.row_parallel};
  share.rank = rank;
  share.world = world;
  share.experts = plan.experts;
  share.vocabulary = plan.vocabulary;
  share.config = plan.config;

  ModelWeights& w = share.weights;
  w.embed_tokens = rows_of(weights.embed_tokens, {share.vocabulary});
  const bool tied = weights.lm_head.data() == weights.embed_tokens.data();
  w.lm_head = tied ? w.embed_tokens : rows_of(weights.lm_head, {share.vocabulary});
  w.final_norm = weights.final_norm;
  for (const LayerWeights& layer : weights.layers) w.layers.push_back(shard_layer(layer, s));
  if (weights.mtp) {
    const MtpWeights& m = *weights.mtp;
    w.mtp = MtpWeights{
        m.pre_fc_norm_embedding, m.pre_fc_norm_hidden, m.fc_embedding, m.fc_hidden, shard_layer(m.layer, s), m.norm};
  }
  return share;
}

Qwen3NextModel rank_model(ModelShare share, RankBackend& backend) {
  PLUMB_CHECK(backend.device() == Device::kCpu && backend.collective().world_size() == share.world &&
                  backend.collective().rank() == share.rank,
              "tensor parallel: rank {} of {} on a {} backend of rank {} of {} (split models run on CPU ranks)",
              share.rank, share.world, backend.device() == Device::kCpu ? "CPU" : "GPU", backend.collective().rank(),
              backend.collective().world_size());
  Qwen3NextModel model(share.config, std::move(share.weights), backend);
  const ModelWeights& w = model.weights();
  backend.bind_vocabulary_rows(w.embed_tokens, share.vocabulary, share.config.vocab_size);
  if (w.lm_head.data() != w.embed_tokens.data())
    backend.bind_vocabulary_rows(w.lm_head, share.vocabulary, share.config.vocab_size);
  size_t next = 0;
  for (const LayerWeights& layer : w.layers) bind_layer(layer, share, next, backend);
  if (w.mtp) bind_layer(w.mtp->layer, share, next, backend);
  PLUMB_CHECK(next == share.row_parallel.size(), "tensor parallel: {} row-parallel shards for {} weights",
              share.row_parallel.size(), next);
  return model;
}

}  // namespace plumb::parallel
