#include "cli/bench_common.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>

#include "cli/device.h"
#include "core/error.h"
#ifdef PLUMB_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace plumb::cli::bench {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<double> time_calls(Backend& be, int64_t repeats, int64_t inner, const std::function<void(int64_t)>& fn) {
  for (int64_t i = 0; i < inner; ++i) fn(i);
  std::vector<double> samples;
  for (int64_t r = 0; r < repeats; ++r) {
    be.synchronize();
    const auto start = Clock::now();
    for (int64_t i = 0; i < inner; ++i) fn(i);
    be.synchronize();
    samples.push_back(seconds_since(start) / static_cast<double>(inner));
  }
  return samples;
}

Tensor random_tensor(Backend& be, DType dtype, const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor t = be.empty(dtype, shape);
  be.random_uniform(t, seed, lo, hi);
  return t;
}

std::string human_time(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1.0) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.3f} s", s);
}
std::string human_bytes(double b) {
  return b >= 1e9 ? fmt::format("{:.3f} GB", b / 1e9) : fmt::format("{:.3f} MB", b / 1e6);
}
std::string human_flops(double f) {
  return f >= 1e12 ? fmt::format("{:.3f} TFLOP", f / 1e12) : fmt::format("{:.3f} GFLOP", f / 1e9);
}
std::string bandwidth(double bytes_per_s) {
  return bytes_per_s >= 10e9 ? fmt::format("{:.0f} GB/s", bytes_per_s / 1e9)
                             : fmt::format("{:.3f} GB/s", bytes_per_s / 1e9);
}
std::string flop_rate(double flops_per_s) {
  return flops_per_s >= 1e12 ? fmt::format("{:.1f} TFLOP/s", flops_per_s / 1e12)
                             : fmt::format("{:.2f} GFLOP/s", flops_per_s / 1e9);
}
std::string percent(double fraction) {
  return fmt::format("{:.1f}%", 100.0 * fraction);
}

void print_table(const std::vector<Row>& rows) {
  const Row head{"what", "shape", "time", "rate", "work", "floor", "of floor"};
  size_t w[7] = {};
  auto widen = [&](const Row& r) {
    const std::string* f[7] = {&r.what, &r.shape, &r.time, &r.rate, &r.work, &r.floor, &r.of_floor};
    for (int i = 0; i < 7; ++i) w[i] = std::max(w[i], f[i]->size());
  };
  widen(head);
  for (const Row& r : rows) widen(r);
  auto line = [&](const Row& r) {
    fmt::print("{:<{}}  {:<{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}\n", r.what, w[0], r.shape, w[1], r.time, w[2],
               r.rate, w[3], r.work, w[4], r.floor, w[5], r.of_floor, w[6]);
  };
  line(head);
  for (const Row& r : rows) line(r);
}

WeightCounts count_weights(const ModelConfig& c, const ModelWeights& w) {
  WeightCounts n;
  // A quantized weight's bytes include its scales, which its products read too.
  auto bytes = [](const Tensor& t) { return static_cast<double>(t.bytes_with_scales()); };
  auto layer_tensor = [&](const Tensor& t) {
    n.dense_bytes += bytes(t);
    if (t.rank() == 2) n.layer_matmul_params += static_cast<double>(t.numel());
  };
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.input_norm, &l.post_attn_norm}) layer_tensor(*t);
    if (l.kind == LayerKind::kGatedDeltaNet) {
      const GdnWeights& g = l.gdn;
      // conv1d [C, K] is a 2-D parameter but no matrix product: counted as bytes only.
      n.dense_bytes += bytes(g.conv1d);
      for (const Tensor* t :
           {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a, &g.A_log, &g.dt_bias, &g.norm, &g.out_proj})
        layer_tensor(*t);
    } else {
      const AttentionWeights& a = l.attn;
      for (const Tensor* t : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &a.q_norm, &a.k_norm}) layer_tensor(*t);
    }
    if (l.mlp_kind == MlpKind::kMoe) {
      const MoeWeights& m = l.moe;
      ++n.moe_layers;
      layer_tensor(m.router);
      if (m.has_shared_expert)
        for (const Tensor* t :
             {&m.shared_expert.gate_proj, &m.shared_expert.up_proj, &m.shared_expert.down_proj, &m.shared_expert_gate})
          layer_tensor(*t);
      n.expert_bytes = (bytes(m.experts.gate_up) + bytes(m.experts.down)) / static_cast<double>(c.num_experts);
      n.expert_params = 3.0 * static_cast<double>(c.moe_intermediate_size * c.hidden_size);
    } else {
      for (const Tensor* t : {&l.mlp.gate_proj, &l.mlp.up_proj, &l.mlp.down_proj}) layer_tensor(*t);
    }
  }
  n.dense_bytes += bytes(w.final_norm) + bytes(w.lm_head);
  n.lm_head_params = static_cast<double>(w.lm_head.numel());
  n.embedding_row_bytes = bytes(w.embed_tokens) / static_cast<double>(c.vocab_size);
  n.total_bytes = n.dense_bytes + n.expert_bytes * static_cast<double>(n.moe_layers * c.num_experts) +
                  (c.tie_word_embeddings ? 0.0 : bytes(w.embed_tokens));
  return n;
}

namespace {

// Expected number of distinct experts B tokens touch in one layer when each picks top_k of E uniformly at random:
// an expert is missed by one token with probability 1 − k/E, by all B with (1 − k/E)^B.
double expected_experts_touched(const ModelConfig& c, int64_t B) {
  const double E = static_cast<double>(c.num_experts), k = static_cast<double>(c.num_experts_per_tok);
  return E * (1.0 - std::pow(1.0 - k / E, static_cast<double>(B)));
}

}  // namespace

StepBytes decode_step_bytes(const ModelConfig& c, const WeightCounts& n, DType kv_dtype, int64_t B, double positions) {
  const double b = static_cast<double>(B);
  const double gdn = c.num_layers_of(LayerKind::kGatedDeltaNet), attn = c.num_layers_of(LayerKind::kFullAttention);
  StepBytes s;
  s.dense = n.dense_bytes;
  s.experts_touched = n.moe_layers > 0 ? expected_experts_touched(c, B) : 0.0;
  s.experts = static_cast<double>(n.moe_layers) * s.experts_touched * n.expert_bytes;
  s.embedding = b * n.embedding_row_bytes;
  s.recurrent = 2.0 * 4.0 *
                static_cast<double>(c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim) * gdn *
                b;
  s.conv = 2.0 * 4.0 * static_cast<double>(c.conv_dim() * (c.linear_conv_kernel_dim - 1)) * gdn * b;
  s.kv = positions * 2.0 * static_cast<double>(c.num_key_value_heads * c.head_dim) *
         static_cast<double>(dtype_size(kv_dtype)) * attn * b;
  return s;
}

// Matrix-product FLOPs of one prefill of T tokens with last-row logits: projections and experts, plus causal
// attention (QKᵀ and PV over T(T+1)/2 query-key pairs). The delta rule's own FLOPs (~6·dk·dv per token and value
// head) are left out: under 2% of the total at these shapes.
double prefill_flops(const ModelConfig& c, const WeightCounts& n, int64_t T) {
  const double t = static_cast<double>(T);
  const double per_token =
      n.layer_matmul_params + static_cast<double>(n.moe_layers * c.num_experts_per_tok) * n.expert_params;
  const double attention = 2.0 * static_cast<double>(c.num_attention_heads * c.head_dim) * t * (t + 1.0) *
                           c.num_layers_of(LayerKind::kFullAttention);
  return 2.0 * t * per_token + 2.0 * n.lm_head_params + attention;
}

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string device_name(const BenchArgs& a, Backend& be) {
  if (!a.device_name.empty()) return a.device_name;
#ifdef PLUMB_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&be)) return cuda->properties().name;
#endif
  return be.device() == Device::kCpu ? "cpu" : a.device;
}

json config_json(const ModelConfig& c) {
  return {{"model_type", c.model_type},
          {"layers", c.num_layers},
          {"gdn_layers", c.num_layers_of(LayerKind::kGatedDeltaNet)},
          {"attention_layers", c.num_layers_of(LayerKind::kFullAttention)},
          {"hidden", c.hidden_size},
          {"vocab", c.vocab_size},
          {"gdn_heads",
           {{"nk", c.linear_num_key_heads},
            {"nv", c.linear_num_value_heads},
            {"dk", c.linear_key_head_dim},
            {"dv", c.linear_value_head_dim}}},
          {"attention_heads", {{"nq", c.num_attention_heads}, {"nkv", c.num_key_value_heads}, {"d", c.head_dim}}},
          {"experts", c.num_experts},
          {"top_k", c.num_experts_per_tok},
          {"moe_intermediate", c.moe_intermediate_size},
          {"shared_expert_intermediate", c.shared_expert_intermediate_size}};
}

}  // namespace

void start_report(Context& ctx, const std::string& benchmark, const SyntheticConfig& synthetic,
                  SyntheticWeights weights) {
  const BenchArgs& a = ctx.args;
  json& out = ctx.out;
  out["benchmark"] = benchmark;
  out["model"] = a.model;
  out["description"] = synthetic.description;
  out["reduced"] = !synthetic.reduction.empty();
  out["reduction"] = synthetic.reduction;
  out["weights_format"] = synthetic_weights_name(weights);
  out["config"] = config_json(synthetic.config);
  out["device"] = a.device;
  out["device_name"] = device_name(a, ctx.be);
  out["date"] = utc_now();
  out["commit"] = a.commit.empty() ? json(nullptr) : json(a.commit);
  fmt::print("model      {} ({}), {} weights\n", a.model, synthetic.description, synthetic_weights_name(weights));
  if (!synthetic.reduction.empty()) fmt::print("REDUCED    {}\n", synthetic.reduction);
  fmt::print("device     {} ({})\n", out["device_name"].get<std::string>(), a.device);
}

BenchSetup set_up(const BenchArgs& a) {
  PLUMB_CHECK(a.tensor_rate_tflops >= 0, "--tensor-rate-tflops must not be negative");
  if (!a.json_path.empty()) {
    // Appending creates the file if need be and keeps what is there; the run rewrites it whole at its end.
    std::ofstream f(a.json_path, std::ios::app);
    PLUMB_CHECK(f.good(), "--json {}: cannot write to it", a.json_path);
  }
  BenchSetup s{synthetic_config(a.model), parse_synthetic_weights(a.weights), nullptr};
  s.backend = make_backend(a.device);
  return s;
}

void write_json(const std::string& path, const json& doc) {
  if (path.empty()) return;
  std::ofstream f(path);
  PLUMB_CHECK(f.good(), "cannot write {}", path);
  f << doc.dump(2) << "\n";
  fmt::print("wrote {}\n", path);
}

void measure_copy(Context& ctx) {
  Backend& be = ctx.be;
  const int64_t mib = ctx.args.copy_mib > 0 ? ctx.args.copy_mib : (be.device() == Device::kCpu ? 64 : 2048);
  const int64_t n = mib * (int64_t{1} << 20) / 4;
  Tensor src = random_tensor(be, DType::kF32, {n}, 11);  // [n]
  Tensor dst = be.empty(DType::kF32, {n});               // [n]
  const std::vector<double> samples = time_calls(be, 10, 1, [&](int64_t) { be.copy(src, dst); });
  const double moved = 2.0 * static_cast<double>(src.nbytes()), s = median(samples);
  ctx.copy_bandwidth = moved / s;
  ctx.rows.push_back(
      {"copy", fmt::format("{} MiB", mib), human_time(s), bandwidth(ctx.copy_bandwidth), human_bytes(moved), "", ""});
  ctx.out["copy"] = {{"buffer_bytes", src.nbytes()},
                     {"bytes_moved", moved},
                     {"median_s", s},
                     {"bandwidth_bytes_per_s", ctx.copy_bandwidth},
                     {"samples_s", samples}};
}

void prefill(const Qwen3NextModel& model, SequenceState& state, TokenStream& tokens, int64_t count) {
  for (int64_t done = 0; done < count; done += kPrefillPiece)
    model.forward(state, tokens.take(std::min(kPrefillPiece, count - done)), LogitsRows::kLast, GdnAlgorithm::kChunked);
}

void clone_state(const Qwen3NextModel& model, const SequenceState& from, SequenceState& to) {
  Backend& be = model.backend();
  for (size_t i = 0; i < from.layers.size(); ++i) {
    const LayerState& f = from.layers[i];
    LayerState& t = to.layers[i];
    if (f.recurrent_state.data()) {
      be.copy(f.recurrent_state, t.recurrent_state);
      be.copy(f.conv_state, t.conv_state);
    }
  }
  to.kv_pages.cover(from.position);
  for (int64_t j = 0; j * kKvPageSize < from.position; ++j)
    model.kv_pool().copy_page(from.kv_pages.ids()[j], to.kv_pages.ids()[j]);
  to.position = from.position;
}

}  // namespace plumb::cli::bench
