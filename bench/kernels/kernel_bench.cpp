// plumb_kernel_bench: the main kernels of a model with synthetic weights, one op at a time: the delta rule's recurrent
// step (decode) and chunked form (prefill), decode and prefill attention, the routed experts of one MoE layer and
// one prefill projection, each against its floor (docs: exactness.md, "evidence for a speed claim"):
//
//   floor = bytes the kernel must move / device-to-device copy bandwidth measured in the same run
//   (or FLOPs / --tensor-rate-tflops for compute-bound work).
//
// A benchmark, not a test: it prints one table and writes the numbers as JSON, and asserts nothing about speed. On
// the GPU each sample is the time between two CUDA events on the backend's stream around back-to-back calls (the
// GPU's time, with no synchronization inside it); on the CPU, wall clock between synchronizations. `plumb bench`
// times the whole model (src/cli/cmd_bench.cpp).
//
// Usage: plumb_kernel_bench --model NAME [--device cuda] [--batches 1,16,64] [--tokens 16384] [--json F] ...
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/bench_common.h"
#include "cli/device.h"
#include "cli/parse.h"
#include "core/error.h"
#include "model/qwen3_next.h"
#include "model/synthetic_weights.h"
#ifdef PLUMB_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/device_limits.h"
#include "backends/cuda/kernels/experts.h"
#include "backends/cuda/kernels/launch_choices.h"
#endif

namespace plumb::cli::bench {
namespace {

// Per-kernel inputs are replicated until one pass over them touches at least this much memory, so memory-bound
// kernels are timed from HBM rather than from the 50 MB L2 (at most kMaxInputSets copies).
constexpr double kL2FlushBytes = 256.0 * (1 << 20);
constexpr int64_t kMaxInputSets = 64;
// FLA's chunked GDN prefill of 16K tokens, one layer, Qwen3-Next shapes, H200 graph replay (docs/peers.md): a figure
// of that machine, not measured here, so the report names the machine beside it.
constexpr double kFlaPrefill16kMsH200 = 1.03;

int64_t input_sets(double bytes_per_call) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(kL2FlushBytes / bytes_per_call)), 1, kMaxInputSets);
}

struct KernelArgs {
  BenchArgs common;  // --device, --model, --weights, --copy-mib, --tensor-rate-tflops, --seed, --json, --commit
  std::string batches = "1,16,64";  // decode kernels' batch sizes
  int64_t tokens = 16384;           // prefill kernels' tokens, and the positions decode attention reads
  int64_t repeats = 10;             // timed samples per kernel
  bool moe_variants = false;        // the decode MoE experts also with each launch variant pinned
};

struct KernelContext : Context {
  KernelContext(const KernelArgs& a, Backend& b, const ModelConfig& c) : Context(a.common, b, c), repeats(a.repeats) {}
  int64_t repeats;
};

// Samples of ctx.repeats timings, each of `inner` back-to-back calls fn(0..inner-1) divided by inner, after one
// untimed pass: on a CUDA backend the time between two events on its stream, elsewhere bench::time_calls' wall clock.
std::vector<double> time_kernel(KernelContext& ctx, int64_t inner, const std::function<void(int64_t)>& fn) {
#ifdef PLUMB_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&ctx.be)) {
    for (int64_t i = 0; i < inner; ++i) fn(i);
    cudaEvent_t start = nullptr, stop = nullptr;
    cuda_check(cudaEventCreate(&start), "cudaEventCreate");
    cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
    std::vector<double> samples;
    for (int64_t r = 0; r < ctx.repeats; ++r) {
      cuda_check(cudaEventRecord(start, cuda->stream()), "cudaEventRecord");
      for (int64_t i = 0; i < inner; ++i) fn(i);
      cuda_check(cudaEventRecord(stop, cuda->stream()), "cudaEventRecord");
      cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      samples.push_back(static_cast<double>(ms) * 1e-3 / static_cast<double>(inner));
    }
    cuda_check(cudaEventDestroy(start), "cudaEventDestroy");
    cuda_check(cudaEventDestroy(stop), "cudaEventDestroy");
    return samples;
  }
#endif
  return time_calls(ctx.be, ctx.repeats, inner, fn);
}

// Adds a memory-bound kernel result: bytes over the copy bandwidth.
json bytes_result(Context& ctx, const std::string& what, const std::string& shape, double s, double bytes,
                  const std::vector<double>& samples) {
  const double floor = bytes / ctx.copy_bandwidth;
  ctx.rows.push_back(
      {what, shape, human_time(s), bandwidth(bytes / s), human_bytes(bytes), human_time(floor), percent(floor / s)});
  return {{"shape", shape},           {"median_s", s},    {"bytes", bytes},
          {"bytes_per_s", bytes / s}, {"floor_s", floor}, {"fraction_of_floor", floor / s},
          {"samples_s", samples}};
}

// Adds a compute-bound kernel result: FLOPs over --tensor-rate-tflops when given.
json flops_result(Context& ctx, const std::string& what, const std::string& shape, double s, double flops,
                  const std::vector<double>& samples) {
  std::optional<double> floor;
  if (ctx.tensor_rate) floor = flops / *ctx.tensor_rate;
  ctx.rows.push_back({what, shape, human_time(s), flop_rate(flops / s), human_flops(flops),
                      floor ? human_time(*floor) : "", floor ? percent(*floor / s) : ""});
  return {{"shape", shape},
          {"median_s", s},
          {"flops", flops},
          {"tflops_per_s", flops / s / 1e12},
          {"floor_s", floor ? json(*floor) : json(nullptr)},
          {"fraction_of_floor", floor ? json(*floor / s) : json(nullptr)},
          {"samples_s", samples}};
}

template <typename T>
const T& first_of_kind(const std::vector<LayerWeights>& layers, LayerKind kind, const T LayerWeights::*field) {
  for (const LayerWeights& l : layers)
    if (l.kind == kind) return l.*field;
  PLUMB_FAIL("bench: the model has no {} layer", layer_kind_name(kind));
}

// The delta rule's recurrent step for B sequences of one layer: the FP32 state is read and written once.
void bench_gdn_decode(KernelContext& ctx, const GdnWeights& w, int64_t B) {
  const ModelConfig& c = ctx.config;
  Backend& be = ctx.be;
  const int64_t nv = c.linear_num_value_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t C = c.conv_dim();
  const double bytes = static_cast<double>(B) * 4.0 *
                       (2.0 * static_cast<double>(nv * dk * dv) + static_cast<double>(C + 2 * nv + nv * dv));
  struct Set {
    Tensor qkv, a, b, o;         // [B, C], [B, nv], [B, nv], [B, nv, dv]
    std::vector<Tensor> states;  // B × [nv, dk, dv]
    std::vector<Tensor*> state_ptrs;
  };
  const int64_t n_sets = input_sets(bytes);
  std::vector<Set> sets(static_cast<size_t>(n_sets));
  BatchRows batch;
  for (int64_t i = 0; i < B; ++i) batch.push_back({i, 1, 100});
  uint64_t seed = 100;
  for (Set& s : sets) {
    s.qkv = random_tensor(be, DType::kF32, {B, C}, ++seed);
    s.a = random_tensor(be, DType::kF32, {B, nv}, ++seed);
    s.b = random_tensor(be, DType::kF32, {B, nv}, ++seed);
    s.o = be.empty(DType::kF32, {B, nv, dv});
    for (int64_t i = 0; i < B; ++i)
      s.states.push_back(random_tensor(be, DType::kF32, {nv, dk, dv}, ++seed, -0.1f, 0.1f));
    for (Tensor& t : s.states) s.state_ptrs.push_back(&t);
  }
  const std::vector<double> samples = time_kernel(ctx, n_sets, [&](int64_t i) {
    Set& s = sets[static_cast<size_t>(i)];
    be.gated_delta_rule(s.qkv, c.linear_num_key_heads, s.a, s.b, w.A_log, w.dt_bias, s.state_ptrs, batch, s.o,
                        GdnAlgorithm::kRecurrent);
  });
  json result = bytes_result(ctx, "kernel gdn decode", fmt::format("B={}", B), median(samples), bytes, samples);
  result["batch"] = B;
  ctx.out["kernels"]["gdn_decode"].push_back(result);
}

// The delta rule's chunked form over one sequence of T tokens, one layer.
void bench_gdn_prefill(KernelContext& ctx, const GdnWeights& w, int64_t T) {
  const ModelConfig& c = ctx.config;
  Backend& be = ctx.be;
  const int64_t nv = c.linear_num_value_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  Tensor qkv = random_tensor(be, DType::kF32, {T, c.conv_dim()}, 201);  // [T, C]
  Tensor a = random_tensor(be, DType::kF32, {T, nv}, 202);              // [T, nv]
  Tensor b = random_tensor(be, DType::kF32, {T, nv}, 203);              // [T, nv]
  Tensor state = be.zeros(DType::kF32, {nv, dk, dv});                   // [nv, dk, dv]
  Tensor o = be.empty(DType::kF32, {T, nv, dv});                        // [T, nv, dv]
  std::vector<Tensor*> states = {&state};
  const BatchRows batch = {{0, T, 0}};
  const std::vector<double> samples = time_kernel(ctx, 1, [&](int64_t) {
    be.gated_delta_rule(qkv, c.linear_num_key_heads, a, b, w.A_log, w.dt_bias, states, batch, o,
                        GdnAlgorithm::kChunked);
  });
  const double s = median(samples);
  // Bytes: q, k, v, a and b read, o written, the state read and written once.
  const double bytes =
      4.0 * (static_cast<double>(T * (c.conv_dim() + 2 * nv + nv * dv)) + 2.0 * static_cast<double>(nv * dk * dv));
  const bool fla_shape = T == 16384 && c.linear_num_key_heads == 16 && nv == 32 && dk == 128 && dv == 128;
  const std::string what = fla_shape ? fmt::format("kernel gdn prefill (FLA on an H200 {:.2f} ms: {:.2f}x)",
                                                   kFlaPrefill16kMsH200, kFlaPrefill16kMsH200 * 1e-3 / s)
                                     : std::string("kernel gdn prefill");
  json result = bytes_result(ctx, what, fmt::format("T={}, chunked", T), s, bytes, samples);
  result["tokens"] = T;
  result["fla_16k_ms_h200"] = fla_shape ? json(kFlaPrefill16kMsH200) : json(nullptr);
  result["speedup_over_fla_h200"] = fla_shape ? json(kFlaPrefill16kMsH200 * 1e-3 / s) : json(nullptr);
  ctx.out["kernels"]["gdn_prefill"] = result;
}

// Decode attention of B sequences of one layer, each over `past` cached positions plus its new one.
void bench_attention_decode(KernelContext& ctx, int64_t B, int64_t past) {
  const ModelConfig& c = ctx.config;
  Backend& be = ctx.be;
  const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const double kv_bytes =
      static_cast<double>(B * (past + 1) * 2 * nkv * d) * static_cast<double>(dtype_size(be.kv_dtype()));
  const double bytes = kv_bytes + static_cast<double>(B * 4 * (2 * nq * d + 2 * nkv * d));
  // Each sequence's past + 1 positions in P pages of one pool; page j of sequence i is pool page j·B + i, the order
  // in which sequences decoding in lockstep take their pages.
  const int64_t P = (past + 1 + kKvPageSize - 1) / kKvPageSize;
  std::vector<std::vector<int32_t>> page_tables(static_cast<size_t>(B));  // [B][P]
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < P; ++j) page_tables[i].push_back(static_cast<int32_t>(j * B + i));
  struct Set {
    Tensor q, k, v, o;            // [B, nq, d], [B, nkv, d], [B, nkv, d], [B, nq, d]
    Tensor k_pool, v_pool;        // [B·P, kKvPageSize, nkv, d]
    std::vector<KvCache> caches;  // B × the pools and page_tables[i]
    std::vector<KvCache*> cache_ptrs;
  };
  const int64_t n_sets = input_sets(bytes);
  std::vector<Set> sets(static_cast<size_t>(n_sets));
  BatchRows batch;
  for (int64_t i = 0; i < B; ++i) batch.push_back({i, 1, past});
  uint64_t seed = 300;
  for (Set& s : sets) {
    s.q = random_tensor(be, DType::kF32, {B, nq, d}, ++seed);
    s.k = random_tensor(be, DType::kF32, {B, nkv, d}, ++seed);
    s.v = random_tensor(be, DType::kF32, {B, nkv, d}, ++seed);
    s.o = be.empty(DType::kF32, {B, nq, d});
    s.k_pool = random_tensor(be, be.kv_dtype(), {B * P, kKvPageSize, nkv, d}, ++seed);
    s.v_pool = random_tensor(be, be.kv_dtype(), {B * P, kKvPageSize, nkv, d}, ++seed);
    for (int64_t i = 0; i < B; ++i) s.caches.push_back({s.k_pool, s.v_pool, page_tables[i]});
    for (KvCache& kv : s.caches) s.cache_ptrs.push_back(&kv);
  }
  const std::vector<double> samples = time_kernel(ctx, n_sets, [&](int64_t i) {
    Set& s = sets[static_cast<size_t>(i)];
    be.attention(s.q, s.k, s.v, s.cache_ptrs, batch, s.o, GdnAlgorithm::kChunked);
  });
  json result = bytes_result(ctx, "kernel attention decode", fmt::format("B={}, past {}", B, past), median(samples),
                             bytes, samples);
  result["batch"] = B;
  result["past_tokens"] = past;
  ctx.out["kernels"]["attention_decode"].push_back(result);
}

// Causal attention over one sequence of T new tokens, one layer.
void bench_attention_prefill(KernelContext& ctx, int64_t T) {
  const ModelConfig& c = ctx.config;
  Backend& be = ctx.be;
  const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  Tensor q = random_tensor(be, DType::kF32, {T, nq, d}, 401);   // [T, nq, d]
  Tensor k = random_tensor(be, DType::kF32, {T, nkv, d}, 402);  // [T, nkv, d]
  Tensor v = random_tensor(be, DType::kF32, {T, nkv, d}, 403);  // [T, nkv, d]
  Tensor o = be.empty(DType::kF32, {T, nq, d});                 // [T, nq, d]
  const int64_t pages = (T + kKvPageSize - 1) / kKvPageSize;
  std::vector<int32_t> page_table(static_cast<size_t>(pages));  // [pages]: pool pages in order
  std::iota(page_table.begin(), page_table.end(), 0);
  KvCache cache{be.empty(be.kv_dtype(), {pages, kKvPageSize, nkv, d}),
                be.empty(be.kv_dtype(), {pages, kKvPageSize, nkv, d}), page_table};
  const std::vector<KvCache*> caches = {&cache};
  const BatchRows batch = {{0, T, 0}};
  const std::vector<double> samples =
      time_kernel(ctx, 1, [&](int64_t) { be.attention(q, k, v, caches, batch, o, GdnAlgorithm::kChunked); });
  // QKᵀ and PV over the T(T+1)/2 causal query-key pairs of every query head.
  const double flops = 2.0 * static_cast<double>(nq * d) * static_cast<double>(T) * static_cast<double>(T + 1);
  ctx.out["kernels"]["attention_prefill"] =
      flops_result(ctx, "kernel attention prefill", fmt::format("T={}", T), median(samples), flops, samples);
}

// The routed experts of one MoE layer over T tokens (gate, up and down products of top_k experts per token).
void bench_moe_experts(KernelContext& ctx, const MoeWeights& w, int64_t T) {
  const ModelConfig& c = ctx.config;
  Backend& be = ctx.be;
  const int64_t H = c.hidden_size, E = c.num_experts, k = c.num_experts_per_tok;
  Tensor x = random_tensor(be, DType::kF32, {T, H}, 501);       // [T, H]
  Tensor logits = random_tensor(be, DType::kF32, {T, E}, 502);  // [T, E] router logits
  Tensor expert_ids = be.empty(DType::kI32, {T, k});            // [T, top_k]
  Tensor expert_weights = be.empty(DType::kF32, {T, k});        // [T, top_k]
  be.moe_route(logits, k, c.norm_topk_prob, expert_ids, expert_weights);
  Tensor y = be.empty(DType::kF32, {T, H});  // [T, H]
  const std::vector<double> samples =
      time_kernel(ctx, 1, [&](int64_t) { be.moe_experts(x, expert_ids, expert_weights, w.experts, y); });
  const double flops = 2.0 * static_cast<double>(T * k) * 3.0 * static_cast<double>(c.moe_intermediate_size * H);
  ctx.out["kernels"]["moe_experts_prefill"] = flops_result(
      ctx, "kernel moe experts", fmt::format("T={}, top {} of {}", T, k, E), median(samples), flops, samples);
}

// The routed experts of one MoE layer at a decode step's row counts: T tokens (a batch's, or a verification's drafts
// and token), each routed by random router logits, a new routing every input set so that calls read their experts
// from HBM rather than L2. Floor: the bytes of the distinct experts a call reads (codes and multipliers) and of its
// activations in and out. With --moe-variants, the same calls with each launch variant pinned in turn
// (CudaBackend::set_linear_variant: kernel, warps and K split, both products), beside production's choice.
void bench_moe_experts_decode(KernelContext& ctx, const MoeWeights& w, int64_t T, bool sweep_variants) {
  const ModelConfig& c = ctx.config;
  Backend& be = ctx.be;
  const int64_t H = c.hidden_size, E = c.num_experts, k = c.num_experts_per_tok;
  const double expert_bytes =
      static_cast<double>(w.experts.gate_up.bytes_with_scales() + w.experts.down.bytes_with_scales()) /
      static_cast<double>(E);
  struct Set {
    Tensor x, ids, weights, y;  // [T, H], [T, top_k], [T, top_k], [T, H]
  };
  // Input sets by the bytes of a typical call (E·(1 − (1 − k/E)^T) experts), then the floor by the experts each set
  // really routes to.
  const double typical = static_cast<double>(E) * (1.0 - std::pow(1.0 - static_cast<double>(k) / static_cast<double>(E),
                                                                  static_cast<double>(T)));
  const int64_t n_sets = input_sets(typical * expert_bytes);
  std::vector<Set> sets(static_cast<size_t>(n_sets));
  double distinct = 0;  // experts read, summed over the sets
  uint64_t seed = 700;
  for (Set& s : sets) {
    s.x = random_tensor(be, DType::kF32, {T, H}, ++seed);                  // [T, H]
    const Tensor logits = random_tensor(be, DType::kF32, {T, E}, ++seed);  // [T, E]
    s.ids = be.empty(DType::kI32, {T, k});
    s.weights = be.empty(DType::kF32, {T, k});
    s.y = be.empty(DType::kF32, {T, H});
    be.moe_route(logits, k, c.norm_topk_prob, s.ids, s.weights);
    std::vector<int32_t> ids(static_cast<size_t>(T * k));
    Tensor host(DType::kI32, {T, k}, Device::kCpu, ids.data(), nullptr);
    be.copy(s.ids, host);
    std::sort(ids.begin(), ids.end());
    distinct += static_cast<double>(std::unique(ids.begin(), ids.end()) - ids.begin());
  }
  const double bytes = distinct / static_cast<double>(n_sets) * expert_bytes + 2.0 * 4.0 * static_cast<double>(T * H);
  auto time_moe = [&] {
    return median(time_kernel(ctx, n_sets, [&](int64_t i) {
      Set& s = sets[static_cast<size_t>(i)];
      be.moe_experts(s.x, s.ids, s.weights, w.experts, s.y);
    }));
  };
  const std::string shape = fmt::format("T={}, top {} of {}", T, k, E);
  const double production = time_moe();
  json result = bytes_result(ctx, "kernel moe experts decode", shape, production, bytes, {production});
  result["tokens"] = T;
  result["experts_read"] = distinct / static_cast<double>(n_sets);
#ifdef PLUMB_HAVE_CUDA
  auto* cuda = dynamic_cast<CudaBackend*>(&be);
  if (sweep_variants && cuda) {
    const cuda::LinearWeights w_type =
        w.experts.gate_up.dtype() == DType::kF8E4M3 ? cuda::LinearWeights::kFp8 : cuda::LinearWeights::kBF16;
    std::set<std::string> timed;
    for (const cuda::LinearVariant& v : cuda::linear_variants(w_type, T * k, cuda::LinearRows::kGrouped)) {
      if (cuda::linear_tile_features(v.shape) != 0 || v.k_split == cuda::kLinearSplitEverySlice) continue;
      if (v.shape != cuda::choose_linear_shape(w_type, cuda::moe_rows_per_expert(T * k, E), T * k,
                                               w.experts.gate_up.dim(1), false, cuda::device_limits()))
        continue;
      for (int32_t split : {1, 2, 4, 8, 16}) {
        cuda::LinearVariant pinned = v;
        pinned.k_split = split;
        const std::string name = fmt::format("{} {} w{} split {}", cuda::linear_shape_name(v.shape),
                                             cuda::linear_stream_kernel_name(v.stream_kernel), v.stream_warps, split);
        if (!timed.insert(name).second) continue;  // linear_variants lists a kernel once for each of its own splits
        cuda->set_linear_variant(pinned);
        try {
          const double s = time_moe();
          json row = bytes_result(ctx, "  pinned " + name, shape, s, bytes, {s});
          row["variant"] = name;
          result["variants"].push_back(row);
        } catch (const Error& e) {
          result["refused"].push_back(name + ": " + e.what());
        }
        cuda->set_linear_variant(std::nullopt);
      }
    }
  }
#else
  (void)sweep_variants;
#endif
  ctx.out["kernels"]["moe_experts_decode"].push_back(result);
}

// One dense projection of a prefill: x [T, K] times w [N, K]ᵀ.
void bench_linear(KernelContext& ctx, const Tensor& w, const std::string& name, int64_t T) {
  Backend& be = ctx.be;
  const int64_t N = w.dim(0), K = w.dim(1);
  Tensor x = random_tensor(be, DType::kF32, {T, K}, 601);  // [T, K]
  Tensor y = be.empty(DType::kF32, {T, N});                // [T, N]
  const std::vector<double> samples = time_kernel(ctx, 1, [&](int64_t) { be.linear(x, w, y); });
  const double flops = 2.0 * static_cast<double>(T) * static_cast<double>(N) * static_cast<double>(K);
  ctx.out["kernels"]["linear_prefill"] = flops_result(
      ctx, "kernel linear " + name, fmt::format("[{}, {}] x [{}, {}]T", T, K, N, K), median(samples), flops, samples);
}

void bench_kernels(KernelContext& ctx, const ModelWeights& weights, const std::vector<int64_t>& batches,
                   int64_t max_prefill, bool moe_variants) {
  const ModelConfig& c = ctx.config;
  const bool has_gdn = c.num_layers_of(LayerKind::kGatedDeltaNet) > 0;
  const bool has_attention = c.num_layers_of(LayerKind::kFullAttention) > 0;
  if (has_gdn) {
    const GdnWeights& gdn = first_of_kind(weights.layers, LayerKind::kGatedDeltaNet, &LayerWeights::gdn);
    for (int64_t B : batches) bench_gdn_decode(ctx, gdn, B);
    bench_gdn_prefill(ctx, gdn, max_prefill);
  }
  if (has_attention) {
    for (int64_t B : batches) bench_attention_decode(ctx, B, max_prefill);
    bench_attention_prefill(ctx, max_prefill);
  }
  for (const LayerWeights& l : weights.layers) {
    if (l.mlp_kind != MlpKind::kMoe) continue;
    for (int64_t T : batches) bench_moe_experts_decode(ctx, l.moe, T, moe_variants);
    bench_moe_experts(ctx, l.moe, std::min<int64_t>(4096, max_prefill));
    break;
  }
  if (has_attention)
    bench_linear(ctx, first_of_kind(weights.layers, LayerKind::kFullAttention, &LayerWeights::attn).q_proj, "q_proj",
                 max_prefill);
  else if (has_gdn)
    bench_linear(ctx, first_of_kind(weights.layers, LayerKind::kGatedDeltaNet, &LayerWeights::gdn).in_proj_qkv,
                 "in_proj_qkv", max_prefill);
}

void run(const KernelArgs& k) {
  const BenchArgs& a = k.common;
  PLUMB_CHECK(k.repeats >= 1, "--repeats must be at least 1, got {}", k.repeats);
  PLUMB_CHECK(k.tokens >= 1, "--tokens must be at least 1, got {}", k.tokens);
  const std::vector<int64_t> batches = parse_sizes(k.batches, "--batches");
  const BenchSetup setup = set_up(a);
  const SyntheticConfig& synthetic = setup.synthetic;
  const SyntheticWeights weights = setup.weights;
  const ModelConfig& c = synthetic.config;
  Backend& be = *setup.backend;
  PLUMB_CHECK(!k.moe_variants || be.device() != Device::kCpu,
              "--moe-variants pins the CUDA backend's launch variants: it needs --device cuda");
  KernelContext ctx(k, be, c);
  const std::string timing = be.device() == Device::kCpu
                                 ? "wall clock between backend.synchronize() calls"
                                 : "CUDA events on the backend's stream around back-to-back calls, no synchronization "
                                   "inside a sample";
  json& out = ctx.out;
  start_report(ctx, "plumb_kernel_bench", synthetic, weights);
  out["options"] = {
      {"batches", batches},   {"tokens", k.tokens},
      {"repeats", k.repeats}, {"moe_variants", k.moe_variants},
      {"seed", a.seed},       {"tensor_rate_tflops", ctx.tensor_rate ? json(a.tensor_rate_tflops) : json(nullptr)}};
  out["formulas"] = {
      {"floor",
       "bytes / copy bandwidth (memory-bound) or FLOPs / tensor rate (compute-bound); fraction = floor / time"},
      {"copy_bandwidth", "(bytes read + bytes written) of one device-to-device copy / its median time"},
      {"timing", timing + ", median"}};
  measure_copy(ctx);
  const Qwen3NextModel model = synthetic_model(c, be, a.seed, weights, /*mtp=*/false);
  be.synchronize();
  out["kernels"] = json::object();
  bench_kernels(ctx, model.weights(), batches, k.tokens, k.moe_variants);
  fmt::print("\n");
  print_table(ctx.rows);
  fmt::print("\nfloor: bytes / copy bandwidth measured above ({}){}; of floor = floor / time.\n",
             bandwidth(ctx.copy_bandwidth),
             ctx.tensor_rate ? fmt::format(", or FLOPs / {} TFLOP/s", a.tensor_rate_tflops) : std::string());
  fmt::print("times: medians of {} samples, {}.\n", k.repeats, timing);
  write_json(a.json_path, out);
}

}  // namespace
}  // namespace plumb::cli::bench

int main(int argc, char** argv) {
  plumb::cli::bench::KernelArgs args;
  CLI::App app("plumb_kernel_bench: a synthetic model's main kernels, one op at a time, against their floors");
  std::string names;
  for (const std::string& n : plumb::synthetic_config_names()) names += (names.empty() ? "" : ", ") + n;
  app.add_option("--model", args.common.model, "synthetic model: " + names)->required();
  app.add_option("--device", args.common.device, plumb::cli::kDeviceHelp);
  app.add_option("--weights", args.common.weights, "projection weights: bf16 or fp8");
  app.add_option("--batches", args.batches, "batch sizes of the decode kernels, comma-separated");
  app.add_option("--tokens", args.tokens, "tokens of the prefill kernels, and positions read by decode attention");
  app.add_option("--repeats", args.repeats, "timed samples per kernel");
  app.add_flag("--moe-variants", args.moe_variants,
               "time the decode MoE experts with each launch variant pinned too (CUDA)");
  app.add_option("--copy-mib", args.common.copy_mib, "copy-bandwidth buffer in MiB (default 2048; 64 on the cpu)");
  app.add_option("--tensor-rate-tflops", args.common.tensor_rate_tflops, "tensor-core rate for compute floors");
  app.add_option("--seed", args.common.seed, "seed of the synthetic weights");
  app.add_option("--json", args.common.json_path, "write every number to this JSON file");
  app.add_option("--device-name", args.common.device_name, "the device's name for the report");
  app.add_option("--commit", args.common.commit, "the git commit measured, for the report");
  CLI11_PARSE(app, argc, argv);
  try {
    plumb::cli::bench::run(args);
  } catch (const plumb::Error& e) {
    std::fprintf(stderr, "plumb_kernel_bench: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plumb_kernel_bench: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
