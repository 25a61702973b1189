#include "cli/model_report.h"

#include <fmt/format.h>

#include <map>

#include "core/error.h"
#include "loader/safetensors.h"
#include "model/weight_table.h"

namespace plumb::cli {
namespace {

struct KindTotals {
  int64_t params = 0;
  double bytes = 0;  // as stored
};

// The bytes a checkpoint tensor takes on the GPU (CudaBackend): BF16 and F32 as stored; FP8 kept in its bytes with a
// multiplier per row and 128-wide K-slice where its blocks follow the slices; F16, NVFP4 (n values), the other FP8
// blocks and every small parameter widened to F32.
double gpu_bytes(const ModelConfig& c, const WeightSlot& slot, const TensorInfo& info, int64_t n) {
  if (slot.role == WeightRole::kParameter) return 4.0 * static_cast<double>(n);
  if (info.dtype == DType::kBF16) return 2.0 * static_cast<double>(n);
  if (info.dtype == DType::kF8E4M3 && c.fp8 && info.shape.size() == 2 &&
      fp8_blocks_follow_slices(info.shape[1], c.fp8->block_cols)) {
    const Shape scales = Tensor::block_scales_shape(info.shape);
    return static_cast<double>(n) + 4.0 * static_cast<double>(shape_numel(scales));
  }
  return 4.0 * static_cast<double>(n);
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// The kind of parameter a checkpoint name holds, for the report.
std::string kind_of(const std::string& name) {
  if (contains(name, "embed_tokens")) return "embedding";
  if (name == "lm_head.weight") return "lm_head";
  if (contains(name, "layernorm") || name.ends_with("model.norm.weight") ||
      name.ends_with("language_model.norm.weight"))
    return "norms";
  if (contains(name, ".linear_attn.")) return "gated_deltanet";
  if (contains(name, ".self_attn.")) return "full_attention";
  if (contains(name, ".mlp.experts.")) return "routed_experts";
  if (contains(name, ".mlp.shared_expert")) return "shared_expert";
  if (contains(name, ".mlp.gate.")) return "router";
  return "dense_mlp";
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

}  // namespace

void print_model_report(const InspectArgs& args) {
  const ModelConfig c = load_model_config(args.model);
  const int64_t context = args.context.value_or(c.max_position_embeddings);
  PLUMB_CHECK(context >= 0, "--context must be >= 0, got {}", context);
  const CheckpointFiles files = CheckpointFiles::open(args.model);
  ModelWeights shapes_only;
  const std::vector<WeightSlot> table =
      build_weight_table(c, shapes_only, [&](const std::string& name) { return files.contains(name); });

  PLUMB_CHECK(args.sequences >= 1, "--sequences must be >= 1, got {}", args.sequences);
  std::map<std::string, KindTotals> kinds;
  int64_t total_params = 0;
  double gpu_weight_bytes = 0;
  double step_weight_bytes = 0;  // weights one decode step reads at batch 1
  const double expert_fraction =
      c.num_experts > 0 ? static_cast<double>(c.num_experts_per_tok) / static_cast<double>(c.num_experts) : 0.0;
  for (const WeightSlot& slot : table) {
    PLUMB_CHECK(files.contains(slot.name), "{}: missing tensor '{}'", files.source(), slot.name);
    const TensorInfo& info = files.info(slot.name);
    double bytes = static_cast<double>(shape_numel(info.shape)) * static_cast<double>(dtype_size(info.dtype));
    // NVFP4 packs two E2M1 values a byte.
    const int64_t n = shape_numel(info.shape) * (info.dtype == DType::kU8 ? 2 : 1);
    // The scales stored beside a quantized weight: FP8's weight_scale_inv; NVFP4's weight_scale, weight_scale_2 and
    // input_scale.
    const std::string module = slot.name.substr(0, slot.name.size() - (slot.name.ends_with(".weight") ? 7 : 0));
    for (const std::string& scale :
         {slot.name + "_scale_inv", module + ".weight_scale", module + ".weight_scale_2", module + ".input_scale"}) {
      if (!files.contains(scale)) continue;
      const TensorInfo& s = files.info(scale);
      bytes += static_cast<double>(shape_numel(s.shape)) * static_cast<double>(dtype_size(s.dtype));
    }
    const std::string kind = kind_of(slot.name);
    kinds[kind].params += n;
    kinds[kind].bytes += bytes;
    total_params += n;
    gpu_weight_bytes += gpu_bytes(c, slot, info, n);
    if (kind == "embedding") {
      // One row is gathered; the rest is read only when tied (as lm_head), counted below.
      step_weight_bytes += bytes / static_cast<double>(c.vocab_size) + (c.tie_word_embeddings ? bytes : 0.0);
    } else if (kind == "routed_experts") {
      step_weight_bytes += bytes * expert_fraction;  // top-k of E experts at batch 1
    } else {
      step_weight_bytes += bytes;
    }
  }

  std::string pattern;
  for (LayerKind k : c.layer_types) pattern += k == LayerKind::kGatedDeltaNet ? 'G' : 'A';
  fmt::print("model        {} ({}), from {}\n", c.model_type, model_family_name(c.family), args.model);
  fmt::print("layers       {}: {} gated deltanet (G), {} full attention (A): {}\n", c.num_layers,
             c.num_layers_of(LayerKind::kGatedDeltaNet), c.num_layers_of(LayerKind::kFullAttention), pattern);
  fmt::print("hidden       {}, vocabulary {}, {} embeddings\n", c.hidden_size, c.vocab_size,
             c.tie_word_embeddings ? "tied" : "untied");
  fmt::print("deltanet     {} key heads x {}, {} value heads x {}, conv kernel {}\n", c.linear_num_key_heads,
             c.linear_key_head_dim, c.linear_num_value_heads, c.linear_value_head_dim, c.linear_conv_kernel_dim);
  fmt::print("attention    {} query heads, {} KV heads, head dim {}, rotary dim {}, rope theta {}, output gate {}\n",
             c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim, c.rope_theta,
             c.attn_output_gate ? "yes" : "no");
  int moe_layers = 0;
  for (MlpKind k : c.mlp_kinds) moe_layers += k == MlpKind::kMoe;
  if (moe_layers > 0)
    fmt::print("experts      {} MoE layers: {} experts, top {}, width {}, shared expert width {}{}\n", moe_layers,
               c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.shared_expert_intermediate_size,
               c.norm_topk_prob ? ", renormalized" : "");
  if (c.num_layers - moe_layers > 0)
    fmt::print("dense mlp    {} layers, width {}\n", c.num_layers - moe_layers, c.intermediate_size);
  if (c.mtp_layers == 1 && files.contains("mtp.fc.weight")) {
    // The head is not counted below: a plain run does not load it.
    ModelWeights with_head;
    int64_t head_params = 0;
    for (const WeightSlot& slot : build_weight_table(
             c, with_head, [&](const std::string& name) { return files.contains(name); }, true))
      if (slot.name.starts_with("mtp.") && files.contains(slot.name))
        head_params += shape_numel(files.info(slot.name).shape) * (files.info(slot.name).dtype == DType::kU8 ? 2 : 1);
    fmt::print("mtp head     1 layer, {:L} parameters (mtp.*): drafts tokens with --speculative-tokens\n", head_params);
  }
  fmt::print("context      {} tokens (max_position_embeddings)\n", c.max_position_embeddings);
  if (c.fp8) fmt::print("quantization fp8 e4m3, blocks {}x{}\n", c.fp8->block_rows, c.fp8->block_cols);
  if (c.nvfp4) {
    fmt::print("quantization nvfp4 (ModelOpt), groups of {}, {} excluded module patterns\n", c.nvfp4->group_size,
               c.nvfp4->exclude_modules.size());
    if (c.nvfp4->fp8_kv_cache_declared)
      fmt::print(
          "kv cache     declared FP8: its k/v scales are checked and not applied; plumb keeps the cache in BF16\n");
  }

  fmt::print("\nparameters by kind (as stored)\n");
  for (const auto& [kind, t] : kinds) fmt::print("  {:<16} {:>16L} {:>14}\n", kind, t.params, human_bytes(t.bytes));
  fmt::print("  {:<16} {:>16L}\n", "total", total_params);

  // Decode state per sequence: the FP32 delta-rule state is read and written every step; the conv window too (FP32);
  // the KV cache (BF16 on the GPU backend) is read for every cached token and written for the new one.
  const int64_t gdn = c.num_layers_of(LayerKind::kGatedDeltaNet), attn = c.num_layers_of(LayerKind::kFullAttention);
  const double state_bytes =
      2.0 * static_cast<double>(gdn) *
      static_cast<double>(c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim +
                          c.conv_dim() * (c.linear_conv_kernel_dim - 1)) *
      4.0;
  const double kv_token_bytes =
      static_cast<double>(attn) * 2.0 * static_cast<double>(c.num_key_value_heads * c.head_dim) * 2.0;
  const double kv_bytes = kv_token_bytes * static_cast<double>(context + 1);
  fmt::print("\nbytes one decode step moves at batch 1, context {}\n", context);
  fmt::print("  {:<34} {:>14}\n", "weights (top-k experts, as stored)", human_bytes(step_weight_bytes));
  fmt::print("  {:<34} {:>14}\n", "recurrent + conv state (fp32, r+w)", human_bytes(state_bytes));
  fmt::print("  {:<34} {:>14}\n", "kv cache (bf16)", human_bytes(kv_bytes));
  fmt::print("  {:<34} {:>14}\n", "total", human_bytes(step_weight_bytes + state_bytes + kv_bytes));

  // On the GPU: the weights as CudaBackend keeps them, and per sequence its state slot (FP32, held once) and its KV
  // pages (BF16, whole pages of 64 positions), as plumb serve reserves them; the step's workspace comes on top.
  const double kv_positions = 64.0 * static_cast<double>((context + 1 + 63) / 64);
  const double sequences = static_cast<double>(args.sequences);
  const double gpu_state = state_bytes / 2.0 * sequences, gpu_kv = kv_token_bytes * kv_positions * sequences;
  fmt::print("\ngpu memory for {} sequence{} of context {} (the step's workspace not included)\n", args.sequences,
             args.sequences == 1 ? "" : "s", context);
  fmt::print("  {:<34} {:>14}\n", "weights", human_bytes(gpu_weight_bytes));
  fmt::print("  {:<34} {:>14}\n", "recurrent + conv state (fp32)", human_bytes(gpu_state));
  fmt::print("  {:<34} {:>14}\n", "kv cache (bf16, pages of 64)", human_bytes(gpu_kv));
  fmt::print("  {:<34} {:>14}\n", "total", human_bytes(gpu_weight_bytes + gpu_state + gpu_kv));
}

}  // namespace plumb::cli
