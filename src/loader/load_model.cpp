#include "loader/load_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "loader/safetensors.h"
#include "model/weight_table.h"

namespace plumb {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Tensors a text forward pass does not use: the vision tower of the multimodal wrappers, and the MTP head unless it
// is loaded.
bool is_ignored(const std::string& name, const ModelConfig& c, bool mtp) {
  return (!mtp && starts_with(name, "mtp.")) || starts_with(name, "model.visual.") ||
         // A tied checkpoint may still carry a copy of the embedding as lm_head; tying means it is not used.
         (c.tie_word_embeddings && name == "lm_head.weight");
}

// The module a quantized weight belongs to (its name less ".weight"), whose other tensors hold its scales.
std::string module_of(const std::string& weight_name, const char* format) {
  const std::string suffix = ".weight";
  PLUMB_CHECK(weight_name.size() > suffix.size() && weight_name.ends_with(suffix),
              "{} tensor '{}' has no '.weight' name to find its scales by", format, weight_name);
  return weight_name.substr(0, weight_name.size() - suffix.size());
}

std::string scale_name_of(const std::string& weight_name) {
  return module_of(weight_name, "FP8") + ".weight_scale_inv";
}

// Whether `text` matches `pattern`, in which '*' stands for any run of characters (ModelOpt's exclude_modules).
// Backtracks only to the last star, so a pattern a stranger wrote costs at most pattern × text steps.
bool matches_glob(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// A calibrated FP8 KV-cache scale, which ModelOpt writes beside an attention layer's k_proj and v_proj
// (`...self_attn.k_proj.k_scale`, `...self_attn.v_proj.v_scale`) when the config declares an FP8 KV cache: checked to
// be one finite positive F32 and not applied, since plumb's cache stays in BF16 (config.cpp, parse_modelopt).
bool is_kv_cache_scale(const CheckpointFiles& files, const ModelConfig& c, const std::string& name) {
  if (!c.nvfp4 || !c.nvfp4->fp8_kv_cache_declared) return false;
  std::string module;
  for (const std::string_view suffix : {".self_attn.k_proj.k_scale", ".self_attn.v_proj.v_scale"})
    if (name.ends_with(suffix)) module = name.substr(0, name.size() - std::string_view(".k_scale").size());
  if (module.empty() || !files.contains(module + ".weight")) return false;
  const TensorInfo& info = files.info(name);
  PLUMB_CHECK(info.dtype == DType::kF32 && shape_numel(info.shape) == 1,
              "KV-cache scale '{}' in {} is {} {}, expected one F32 value", name, info.file, dtype_name(info.dtype),
              shape_str(info.shape));
  const float value = *files.tensor(name).f32();
  PLUMB_CHECK(std::isfinite(value) && value > 0.0f, "KV-cache scale '{}' in {} is {}, expected a positive number", name,
              info.file, value);
  return true;
}

// The scales of an NVFP4 weight: [N, K / 16] E4M3, one F32, and the activation scale plumb does not use (the
// products take BF16 activations).
struct Nvfp4Scales {
  std::string scale, scale_2, input_scale;
};
Nvfp4Scales nvfp4_scales_of(const std::string& weight_name) {
  const std::string module = module_of(weight_name, "NVFP4");
  return {module + ".weight_scale", module + ".weight_scale_2", module + ".input_scale"};
}

// An NVFP4 slot in its own bytes (nvfp4_weight), after checking that the config declares NVFP4, that the module is not
// one it leaves unquantized, and that its scales are there.
Tensor read_nvfp4(const CheckpointFiles& files, const ModelConfig& c, const WeightSlot& slot,
                  std::set<std::string>& used) {
  const TensorInfo& info = files.info(slot.name);
  PLUMB_CHECK(slot.role == WeightRole::kProjection && slot.shape.size() == 2,
              "tensor '{}' in {} is U8, but plumb reads packed NVFP4 only for 2-D projections", slot.name, info.file);
  PLUMB_CHECK(c.nvfp4.has_value(),
              "tensor '{}' in {} is U8 (packed NVFP4?), but the folder declares no NVFP4 quantization "
              "(hf_quant_config.json, or a modelopt quantization_config)",
              slot.name, info.file);
  const std::string module = module_of(slot.name, "NVFP4");
  for (const std::string& pattern : c.nvfp4->exclude_modules)
    PLUMB_CHECK(!matches_glob(pattern, module),
                "tensor '{}' in {} is NVFP4, but exclude_modules leaves '{}' ('{}') unquantized", slot.name, info.file,
                module, pattern);
  PLUMB_CHECK(info.shape == Shape({slot.shape[0], slot.shape[1] / 2}) && slot.shape[1] % 2 == 0,
              "NVFP4 tensor '{}' in {} has shape {}, expected [{}, {}] (two E2M1 values a byte) for a {} weight",
              slot.name, info.file, shape_str(info.shape), slot.shape[0], slot.shape[1] / 2, shape_str(slot.shape));
  const Nvfp4Scales s = nvfp4_scales_of(slot.name);
  for (const std::string* name : {&s.scale, &s.scale_2})
    PLUMB_CHECK(files.contains(*name), "NVFP4 tensor '{}' in {} has no '{}'", slot.name, info.file, *name);
  used.insert(s.scale);
  used.insert(s.scale_2);
  if (files.contains(s.input_scale)) used.insert(s.input_scale);
  return nvfp4_weight(files.tensor(slot.name), files.tensor(s.scale), files.tensor(s.scale_2), c.nvfp4->group_size,
                      slot.name);
}

// The checkpoint tensor for one slot as a host tensor: dtype checked, FP8 with its block scales (or dequantized),
// NVFP4 with its scales, parameters in F32.
Tensor read_slot(const CheckpointFiles& files, const ModelConfig& c, const WeightSlot& slot,
                 std::set<std::string>& used) {
  const TensorInfo& info = files.info(slot.name);
  used.insert(slot.name);
  if (info.dtype == DType::kU8) return read_nvfp4(files, c, slot, used);
  PLUMB_CHECK(info.shape == slot.shape, "tensor '{}' in {} has shape {}, expected {}", slot.name, info.file,
              shape_str(info.shape), shape_str(slot.shape));
  Tensor t = files.tensor(slot.name);
  switch (info.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      break;
    case DType::kF8E4M3: {
      PLUMB_CHECK(slot.role == WeightRole::kProjection && slot.shape.size() == 2,
                  "tensor '{}' in {} is F8_E4M3, but plumb reads FP8 only for 2-D projections", slot.name, info.file);
      PLUMB_CHECK(c.fp8.has_value(), "tensor '{}' in {} is F8_E4M3, but config.json has no fp8 quantization_config",
                  slot.name, info.file);
      const std::string scale = scale_name_of(slot.name);
      PLUMB_CHECK(files.contains(scale), "FP8 tensor '{}' in {} has no '{}'", slot.name, info.file, scale);
      used.insert(scale);
      // Blocks that follow the products' K-slices stay in their bytes (the backend widens them or multiplies each
      // slice's partial sums); others expand to F32 here.
      t = fp8_blocks_follow_slices(info.shape[1], c.fp8->block_cols)
              ? fp8_weight_with_scales(t, files.tensor(scale), c.fp8->block_rows, c.fp8->block_cols, slot.name)
              : dequantize_fp8_blocks(t, files.tensor(scale), c.fp8->block_rows, c.fp8->block_cols, slot.name);
      break;
    }
    default:
      PLUMB_FAIL("tensor '{}' in {} has dtype {}; expected F32, BF16, F16, F8_E4M3 or U8 (NVFP4)", slot.name, info.file,
                 dtype_name(info.dtype));
  }
  if (slot.role == WeightRole::kParameter && t.dtype() != DType::kF32) {
    Tensor f = Tensor::zeros(DType::kF32, t.shape());
    convert_to_f32(t.dtype(), t.data(), f.f32(), static_cast<size_t>(t.numel()));
    t = f;
  }
  return t;
}

// Throws naming the tensor and its first non-finite element.
void check_finite(const Tensor& host, const std::string& name, const std::string& file) {
  const auto n = static_cast<size_t>(host.numel());
  const auto* bytes = static_cast<const unsigned char*>(host.data());
  std::vector<float> chunk(std::min<size_t>(n, size_t{1} << 16));
  for (size_t begin = 0; begin < n; begin += chunk.size()) {
    const size_t count = std::min(chunk.size(), n - begin);
    convert_to_f32(host.dtype(), bytes + dtype_bytes(host.dtype(), static_cast<int64_t>(begin)), chunk.data(), count);
    for (size_t i = 0; i < count; ++i)
      PLUMB_CHECK(std::isfinite(chunk[i]), "{}: tensor '{}' holds {} at element {} (found by --check-weights)", file,
                  name, chunk[i], begin + i);
  }
}

// The checkpoint bytes a slot reads: its tensor and, for FP8 and NVFP4, the scales beside it.
int64_t stored_bytes(const CheckpointFiles& files, const WeightSlot& slot) {
  const auto bytes = [&](const std::string& name) {
    const TensorInfo& info = files.info(name);
    return shape_numel(info.shape) * static_cast<int64_t>(dtype_size(info.dtype));
  };
  const TensorInfo& info = files.info(slot.name);
  int64_t total = bytes(slot.name);
  if (info.dtype == DType::kF8E4M3 && slot.name.ends_with(".weight") && files.contains(scale_name_of(slot.name)))
    total += bytes(scale_name_of(slot.name));
  if (info.dtype == DType::kU8 && slot.name.ends_with(".weight")) {
    const Nvfp4Scales s = nvfp4_scales_of(slot.name);
    for (const std::string* name : {&s.scale, &s.scale_2, &s.input_scale})
      if (files.contains(*name)) total += bytes(*name);
  }
  return total;
}

// Counts the bytes read per file against totals summed over the table before loading, for LoadOptions::on_progress.
class ProgressCounter {
 public:
  ProgressCounter(const CheckpointFiles& files, const std::vector<WeightSlot>& table,
                  std::function<void(const LoadProgress&)> on_progress)
      : files_(files), on_progress_(std::move(on_progress)) {
    for (const WeightSlot& slot : table) {
      if (!files.contains(slot.name)) continue;  // the load fails on it, naming it
      Shard& shard = shards_[files.info(slot.name).file];
      if (shard.number == 0) shard.number = static_cast<int>(shards_.size());
      shard.bytes_left += stored_bytes(files, slot);
      progress_.bytes_total += stored_bytes(files, slot);
    }
    progress_.shards = static_cast<int>(shards_.size());
  }
  void read(const WeightSlot& slot) {
    if (!on_progress_) return;
    const int64_t bytes = stored_bytes(files_, slot);
    progress_.file = files_.info(slot.name).file;
    Shard& shard = shards_.at(progress_.file);
    shard.bytes_left -= bytes;
    progress_.shard = shard.number;
    progress_.shard_done = shard.bytes_left == 0;
    progress_.bytes_done += bytes;
    on_progress_(progress_);
  }

 private:
  struct Shard {
    int number = 0;
    int64_t bytes_left = 0;
  };
  const CheckpointFiles& files_;
  std::function<void(const LoadProgress&)> on_progress_;
  std::map<std::string, Shard> shards_;
  LoadProgress progress_;
};

}  // namespace

LoadedModel load_model(const std::string& model_dir, Backend& backend, const LoadOptions& options) {
  LoadedModel m{load_model_config(model_dir), {}};
  const ModelConfig& c = m.config;
  PLUMB_CHECK(!options.mtp || c.mtp_layers == 1,
              "{}/config.json declares {} multi-token-prediction layers (mtp_num_hidden_layers); speculative "
              "decoding drafts with a head of exactly one",
              model_dir, c.mtp_layers);
  const CheckpointFiles files = CheckpointFiles::open(model_dir);
  const std::vector<WeightSlot> table = build_weight_table(
      c, m.weights, [&](const std::string& name) { return files.contains(name); }, options.mtp);

  ProgressCounter progress(files, table, options.on_progress);
  std::set<std::string> used;
  for (const WeightSlot& slot : table) {
    PLUMB_CHECK(files.contains(slot.name), "{}: missing tensor '{}' (expected shape {} for a {} model)", files.source(),
                slot.name, shape_str(slot.shape), c.model_type);
    Tensor host = read_slot(files, c, slot, used);
    if (options.check_weights) check_finite(host, slot.name, files.info(slot.name).file);
    switch (slot.transform) {
      case WeightTransform::kNone:
        *slot.targets[0] = backend.upload(host);
        break;
      case WeightTransform::kConvKernel:
        *slot.targets[0] = backend.upload(host.reshape({slot.shape[0], slot.shape[2]}));
        break;
      case WeightTransform::kQwen3NextQkvz: {
        const Tensor permuted = permute_qwen3_next_qkvz(host, c);
        *slot.targets[0] = backend.upload(permuted.rows(0, c.conv_dim()));
        *slot.targets[1] = backend.upload(permuted.rows(c.conv_dim(), c.conv_dim() + c.value_dim()));
        break;
      }
      case WeightTransform::kQwen3NextBa: {
        const Tensor permuted = permute_qwen3_next_ba(host, c);
        const int64_t nv = c.linear_num_value_heads;
        *slot.targets[0] = backend.upload(permuted.rows(0, nv));
        *slot.targets[1] = backend.upload(permuted.rows(nv, 2 * nv));
        break;
      }
      case WeightTransform::kColumnHalves: {
        const int64_t half = slot.shape[1] / 2;
        // Quantized bytes stay so only where the halves split on a boundary of their scales (an FP8 weight's K-slice,
        // an NVFP4 weight's group); else they widen here.
        const int64_t boundary = host.dtype() == DType::kE2M1 ? kNvfp4GroupK : kWeightScaleBlockK;
        const Tensor whole = host.block_scales() && half % boundary != 0 ? widen_quantized(host) : host;
        *slot.targets[0] = backend.upload(column_range(whole, 0, half));
        *slot.targets[1] = backend.upload(column_range(whole, half, 2 * half));
        break;
      }
    }
    progress.read(slot);
  }
  for (const std::string& name : files.names()) {
    if (used.count(name) || is_ignored(name, c, options.mtp) || is_kv_cache_scale(files, c, name)) continue;
    PLUMB_FAIL("unexpected tensor '{}' in {}: a {} model with this config.json has no such weight", name,
               files.info(name).file, c.model_type);
  }
  finish_weights(c, m.weights, backend);
  return m;
}

}  // namespace plumb
