#include "model/weight_table.h"

#include <cstring>

#include "core/error.h"

namespace plumb {
namespace {

// Copies source rows into a new host tensor in the order `row_order` lists them; an FP8 weight's block scales
// move with their rows.
void append_range(std::vector<int64_t>& rows, int64_t begin, int64_t count) {
  for (int64_t i = 0; i < count; ++i) rows.push_back(begin + i);
}

class TableBuilder {
 public:
  TableBuilder(const ModelConfig& c, std::vector<WeightSlot>& slots) : c_(c), slots_(slots) {}

  void add(std::string name, Shape shape, Tensor* target, WeightRole role = WeightRole::kProjection,
           WeightTransform transform = WeightTransform::kNone, Tensor* second = nullptr) {
    WeightSlot slot{std::move(name), std::move(shape), role, transform, {target}};
    if (second) slot.targets.push_back(second);
    slots_.push_back(std::move(slot));
  }
  void vector(std::string name, int64_t n, Tensor* target) {
    add(std::move(name), {n}, target, WeightRole::kParameter);
  }
  void mlp(const std::string& p, int64_t width, MlpWeights& w) {
    add(p + "gate_proj.weight", {width, c_.hidden_size}, &w.gate_proj);
    add(p + "up_proj.weight", {width, c_.hidden_size}, &w.up_proj);
    add(p + "down_proj.weight", {c_.hidden_size, width}, &w.down_proj);
  }

 private:
  const ModelConfig& c_;
  std::vector<WeightSlot>& slots_;
};

void add_gdn(TableBuilder& b, const ModelConfig& c, const std::string& p, GdnWeights& w) {
  const int64_t H = c.hidden_size, nv = c.linear_num_value_heads;
  if (c.family == ModelFamily::kQwen3Next) {
    b.add(p + "in_proj_qkvz.weight", {c.conv_dim() + c.value_dim(), H}, &w.in_proj_qkv, WeightRole::kProjection,
          WeightTransform::kQwen3NextQkvz, &w.in_proj_z);
    b.add(p + "in_proj_ba.weight", {2 * nv, H}, &w.in_proj_b, WeightRole::kProjection, WeightTransform::kQwen3NextBa,
          &w.in_proj_a);
  } else {
    b.add(p + "in_proj_qkv.weight", {c.conv_dim(), H}, &w.in_proj_qkv);
    b.add(p + "in_proj_z.weight", {c.value_dim(), H}, &w.in_proj_z);
    b.add(p + "in_proj_b.weight", {nv, H}, &w.in_proj_b);
    b.add(p + "in_proj_a.weight", {nv, H}, &w.in_proj_a);
  }
  b.add(p + "conv1d.weight", {c.conv_dim(), 1, c.linear_conv_kernel_dim}, &w.conv1d, WeightRole::kParameter,
        WeightTransform::kConvKernel);
  b.vector(p + "A_log", nv, &w.A_log);
  b.vector(p + "dt_bias", nv, &w.dt_bias);
  b.vector(p + "norm.weight", c.linear_value_head_dim, &w.norm);
  b.add(p + "out_proj.weight", {H, c.value_dim()}, &w.out_proj);
}

void add_attention(TableBuilder& b, const ModelConfig& c, const std::string& p, AttentionWeights& w) {
  const int64_t H = c.hidden_size, d = c.head_dim;
  b.add(p + "q_proj.weight", {c.num_attention_heads * d * (c.attn_output_gate ? 2 : 1), H}, &w.q_proj);
  b.add(p + "k_proj.weight", {c.num_key_value_heads * d, H}, &w.k_proj);
  b.add(p + "v_proj.weight", {c.num_key_value_heads * d, H}, &w.v_proj);
  b.add(p + "o_proj.weight", {H, c.num_attention_heads * d}, &w.o_proj);
  b.vector(p + "q_norm.weight", d, &w.q_norm);
  b.vector(p + "k_norm.weight", d, &w.k_norm);
}

void add_moe(TableBuilder& b, const ModelConfig& c, const std::string& p, MoeWeights& w,
             const std::function<bool(const std::string&)>& contains) {
  const int64_t H = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
  b.add(p + "gate.weight", {E, H}, &w.router);
  const std::string experts = p + "experts.";
  if (contains(experts + "gate_up_proj")) {
    // Fused 3-D layout: gate_up_proj [E, 2I, H] (rows 0..I-1 gate, I..2I-1 up) and down_proj [E, H, I].
    w.storage.resize(2);
    b.add(experts + "gate_up_proj", {E, 2 * I, H}, &w.storage[0]);
    b.add(experts + "down_proj", {E, H, I}, &w.storage[1]);
  } else {
    // One tensor per expert and projection: storage[3e + 0, 1, 2] = gate, up, down of expert e.
    w.storage.resize(3 * E);
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = experts + std::to_string(e) + ".";
      b.add(q + "gate_proj.weight", {I, H}, &w.storage[3 * e]);
      b.add(q + "up_proj.weight", {I, H}, &w.storage[3 * e + 1]);
      b.add(q + "down_proj.weight", {H, I}, &w.storage[3 * e + 2]);
    }
  }
  w.has_shared_expert = c.shared_expert_intermediate_size > 0;
  if (w.has_shared_expert) {
    b.mlp(p + "shared_expert.", c.shared_expert_intermediate_size, w.shared_expert);
    b.add(p + "shared_expert_gate.weight", {1, H}, &w.shared_expert_gate);
  }
}

void add_decoder_layer(TableBuilder& b, const ModelConfig& c, const std::string& lp, LayerKind kind, MlpKind mlp_kind,
                       LayerWeights& layer, const std::function<bool(const std::string&)>& contains) {
  layer.kind = kind;
  layer.mlp_kind = mlp_kind;
  b.vector(lp + "input_layernorm.weight", c.hidden_size, &layer.input_norm);
  b.vector(lp + "post_attention_layernorm.weight", c.hidden_size, &layer.post_attn_norm);
  if (kind == LayerKind::kGatedDeltaNet)
    add_gdn(b, c, lp + "linear_attn.", layer.gdn);
  else
    add_attention(b, c, lp + "self_attn.", layer.attn);
  if (mlp_kind == MlpKind::kMoe)
    add_moe(b, c, lp + "mlp.", layer.moe, contains);
  else
    b.mlp(lp + "mlp.", c.intermediate_size, layer.mlp);
}

}  // namespace

std::vector<WeightSlot> build_weight_table(const ModelConfig& c, ModelWeights& w,
                                           const std::function<bool(const std::string&)>& contains, bool mtp) {
  std::vector<WeightSlot> slots;
  TableBuilder b(c, slots);
  const std::string& p = c.tensor_prefix;
  b.add(p + "embed_tokens.weight", {c.vocab_size, c.hidden_size}, &w.embed_tokens);
  b.vector(p + "norm.weight", c.hidden_size, &w.final_norm);
  if (!c.tie_word_embeddings) b.add("lm_head.weight", {c.vocab_size, c.hidden_size}, &w.lm_head);
  w.layers.assign(c.num_layers, LayerWeights{});
  for (int64_t i = 0; i < c.num_layers; ++i)
    add_decoder_layer(b, c, p + "layers." + std::to_string(i) + ".", c.layer_types[i], c.mlp_kinds[i], w.layers[i],
                      contains);
  if (mtp) {
    PLUMB_CHECK(c.mtp_layers == 1, "the weight table lists an MTP head of one layer, and the config declares {}",
                c.mtp_layers);
    MtpWeights& m = w.mtp.emplace();
    const int64_t H = c.hidden_size;
    b.vector("mtp.pre_fc_norm_embedding.weight", H, &m.pre_fc_norm_embedding);
    b.vector("mtp.pre_fc_norm_hidden.weight", H, &m.pre_fc_norm_hidden);
    b.add("mtp.fc.weight", {H, 2 * H}, &m.fc_embedding, WeightRole::kProjection, WeightTransform::kColumnHalves,
          &m.fc_hidden);
    // The head's one layer attends like the main model's full-attention layers; its MLP is a mixture of experts in
    // the MoE families and dense in dense Qwen3.5, as the main model's layers are.
    add_decoder_layer(b, c, "mtp.layers.0.", LayerKind::kFullAttention, c.mtp_mlp_kind(), m.layer, contains);
    b.vector("mtp.norm.weight", H, &m.norm);
  }
  return slots;
}

void finish_weights(const ModelConfig& c, ModelWeights& w, Backend& backend) {
  if (c.tie_word_embeddings) w.lm_head = w.embed_tokens;
  const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
  for (LayerWeights* layer_ptr : decoder_layers(w)) {
    LayerWeights& layer = *layer_ptr;
    MoeWeights& moe = layer.moe;
    if (layer.mlp_kind != MlpKind::kMoe) continue;
    if (moe.storage.size() == 2) {
      moe.experts.gate_up = moe.storage[0];
      moe.experts.down = moe.storage[1];
    } else {
      const DType dtype = moe.storage[0].dtype();
      moe.experts.gate_up = backend.empty(dtype, {E, 2 * I, H});
      moe.experts.down = backend.empty(dtype, {E, H, I});
      for (int64_t e = 0; e < E; ++e) {
        Tensor gate_up = moe.experts.gate_up.rows(e, e + 1).reshape({2 * I, H});
        Tensor gate = gate_up.rows(0, I), up = gate_up.rows(I, 2 * I);
        Tensor down = moe.experts.down.rows(e, e + 1).reshape({H, I});
        backend.copy(moe.storage[3 * e], gate);
        backend.copy(moe.storage[3 * e + 1], up);
        backend.copy(moe.storage[3 * e + 2], down);
      }
    }
    moe.storage.clear();
  }
}

Tensor gather_rows(const Tensor& from, const std::vector<int64_t>& row_order) {
  PLUMB_CHECK(from.rank() >= 1 && from.dim(0) > 0, "gather_rows: rows of a tensor of shape {}",
              shape_str(from.shape()));
  Shape shape = from.shape();
  shape[0] = static_cast<int64_t>(row_order.size());
  Tensor out = Tensor::zeros(from.dtype(), shape);
  const size_t row_bytes = from.nbytes() / static_cast<size_t>(from.dim(0));
  for (size_t r = 0; r < row_order.size(); ++r) {
    PLUMB_CHECK(row_order[r] >= 0 && row_order[r] < from.dim(0), "gather_rows: row {} of {}", row_order[r],
                from.dim(0));
    std::memcpy(static_cast<char*>(out.data()) + r * row_bytes,
                static_cast<const char*>(from.data()) + static_cast<size_t>(row_order[r]) * row_bytes, row_bytes);
  }
  if (const Tensor* scales = from.block_scales()) out = out.with_block_scales(gather_rows(*scales, row_order));
  if (const Tensor* scales = from.group_scales()) out = out.with_group_scales(gather_rows(*scales, row_order));
  return out;
}

Tensor column_range(const Tensor& from, int64_t begin, int64_t end) {
  PLUMB_CHECK(from.shape().size() == 2 && 0 <= begin && begin <= end && end <= from.dim(1),
              "column_range: columns [{}, {}) of a tensor of shape {}", begin, end, shape_str(from.shape()));
  const int64_t rows = from.dim(0), cols = from.dim(1);
  const DType dtype = from.dtype();
  // A quantized weight's scales cover runs of K (an FP8 weight's K-slices, an NVFP4 weight's groups), so the range must
  // not cut one.
  const bool nvfp4 = dtype == DType::kE2M1;
  const int64_t run = nvfp4 ? kNvfp4GroupK : kWeightScaleBlockK;
  if (from.block_scales() != nullptr)
    PLUMB_CHECK(begin % run == 0 && (end % run == 0 || end == cols),
                "column_range: columns [{}, {}) cut an {} weight's {}-column scale {}", begin, end,
                nvfp4 ? "NVFP4" : "FP8", run, nvfp4 ? "groups" : "slices");
  Tensor out = Tensor::zeros(dtype, {rows, end - begin});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(out.data()) + dtype_bytes(dtype, r * (end - begin)),
                static_cast<const char*>(from.data()) + dtype_bytes(dtype, r * cols + begin),
                dtype_bytes(dtype, end - begin));
  if (nvfp4) {
    // [N, 1]: the weight's scale, the same for every column.
    out = out.with_block_scales(*from.block_scales());
    out = out.with_group_scales(column_range(*from.group_scales(), begin / run, end / run));
  } else if (const Tensor* scales = from.block_scales()) {
    out = out.with_block_scales(column_range(*scales, begin / run, (end + run - 1) / run));
  }
  return out;
}

Tensor permute_qwen3_next_qkvz(const Tensor& from, const ModelConfig& c) {
  const int64_t nk = c.linear_num_key_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t rho = c.value_heads_per_key_head(), group = 2 * dk + 2 * rho * dv;
  std::vector<int64_t> rows;
  for (int64_t g = 0; g < nk; ++g) append_range(rows, g * group, dk);                            // q of key head g
  for (int64_t g = 0; g < nk; ++g) append_range(rows, g * group + dk, dk);                       // k of key head g
  for (int64_t g = 0; g < nk; ++g) append_range(rows, g * group + 2 * dk, rho * dv);             // v of its value heads
  for (int64_t g = 0; g < nk; ++g) append_range(rows, g * group + 2 * dk + rho * dv, rho * dv);  // z likewise
  PLUMB_CHECK(static_cast<int64_t>(rows.size()) == from.dim(0), "in_proj_qkvz: {} rows, expected {}", from.dim(0),
              rows.size());
  return gather_rows(from, rows);
}

Tensor permute_qwen3_next_ba(const Tensor& from, const ModelConfig& c) {
  const int64_t nk = c.linear_num_key_heads, rho = c.value_heads_per_key_head();
  std::vector<int64_t> rows;
  for (int64_t g = 0; g < nk; ++g) append_range(rows, g * 2 * rho, rho);        // b of key head g's value heads
  for (int64_t g = 0; g < nk; ++g) append_range(rows, g * 2 * rho + rho, rho);  // a likewise
  PLUMB_CHECK(static_cast<int64_t>(rows.size()) == from.dim(0), "in_proj_ba: {} rows, expected {}", from.dim(0),
              rows.size());
  return gather_rows(from, rows);
}

}  // namespace plumb
