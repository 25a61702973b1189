// plumb bench: decode and prefill speed of a model with synthetic weights, and the speed of its main kernels, each
// stated against a floor counted from first principles (docs: exactness.md, "evidence for a speed claim"):
//
//   floor = bytes the work must move / device-to-device copy bandwidth measured in the same run
//   (or FLOPs / --tensor-rate-tflops for compute-bound work).
//
// A benchmark, not a test: it prints one table and writes the numbers as JSON, and asserts nothing about speed.
// Timings are wall-clock between backend.synchronize() calls, so they include host launch overhead (no graphs).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench_common.h"
#include "cli/bench_speculative.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/parse.h"
#include "core/error.h"
#include "engine/runner.h"
#include "engine/step_graphs.h"
#include "model/qwen3_next.h"
#include "model/synthetic_weights.h"
#ifdef PLUMB_HAVE_CUDA
#include <cuda_profiler_api.h>

#include "backends/cuda/cuda_backend.h"
#endif

namespace plumb::cli {
namespace {

using namespace bench;

// Per-kernel inputs are replicated until one pass over them touches at least this much memory, so memory-bound
// kernels are timed from HBM rather than from the 50 MB L2 (at most kMaxInputSets copies).
constexpr double kL2FlushBytes = 256.0 * (1 << 20);
constexpr int64_t kMaxInputSets = 64;
// FLA's chunked GDN prefill of 16K tokens, one layer, Qwen3-Next shapes, H200 graph replay (docs/peers.md).
constexpr double kFlaPrefill16kMs = 1.03;

int64_t input_sets(double bytes_per_call) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(kL2FlushBytes / bytes_per_call)), 1, kMaxInputSets);
}

// Starts or stops the CUDA profiler's range (cudaProfilerStart/Stop) on a CUDA backend; nothing elsewhere.
void profiler_range(Backend& be, bool start) {
#ifdef PLUMB_HAVE_CUDA
  if (dynamic_cast<CudaBackend*>(&be) != nullptr)
    cuda_check(start ? cudaProfilerStart() : cudaProfilerStop(), "cudaProfilerStart/Stop");
#else
  (void)be;
  (void)start;
#endif
}

// Rounds of queued decode steps (bench_decode) after the synchronized ones.
constexpr int kQueuedRounds = 3;

void bench_decode(Context& ctx, const Qwen3NextModel& model, const WeightCounts& counts, int64_t B) {
  const BenchArgs& a = ctx.args;
  Backend& be = ctx.be;
  TokenStream tokens(ctx.config.vocab_size, a.seed + static_cast<uint64_t>(B));
  const int64_t capacity = a.context + a.warmup + (1 + kQueuedRounds) * a.steps;
  // Every sequence starts from the same prefilled prompt: prefill one, copy its state into the others. The pool is
  // sized for all of them at once, so it grows once rather than doubling along the way.
  const int64_t pages_each = (capacity + kKvPageSize - 1) / kKvPageSize;
  model.kv_pool().reserve(model.kv_pool().used_pages() + (B + 1) * pages_each);
  SequenceState prompt = model.new_sequence(capacity);
  prefill(model, prompt, tokens, a.context);
  std::vector<SequenceState> states;
  states.reserve(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    states.push_back(model.new_sequence(capacity));
    clone_state(model, prompt, states.back());
  }
  std::vector<SequenceInput> batch(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) batch[i].state = &states[i];
  // Steps replay a recording of the first (a graph of bucket B) unless --no-graphs. Each ends with its rows' token
  // draws (greedy unless --temperature), as a served step does on the GPU.
  StepGraphs graphs(model, {!a.no_graphs, {B}});
  std::vector<TokenDraw> draws(static_cast<size_t>(B), a.draw);
  auto step = [&] {
    for (SequenceInput& s : batch) s.ids = {tokens.next()};
    for (TokenDraw& d : draws) ++d.step;
    graphs.forward(batch, draws);
  };
  for (int64_t i = 0; i < a.warmup; ++i) step();
  // Per step: the wall time, and the host's share of it (until the last launch is queued): a step whose host time
  // reaches its wall time is bound by the host, not by the GPU.
  std::vector<double> samples, host_samples;
  const int64_t launches_before = be.kernel_launches();
  for (int64_t i = 0; i < a.steps; ++i) {
    be.synchronize();
    // The last timed step is the one a profiler started with --profile-from-start off sees (ncu, tools/ncu_summary.py).
    const bool profiled = a.profile_last_step && i + 1 == a.steps;
    if (profiled) profiler_range(be, true);
    const auto start = Clock::now();
    step();
    host_samples.push_back(seconds_since(start));
    be.synchronize();
    samples.push_back(seconds_since(start));
    if (profiled) profiler_range(be, false);
  }
  const double launches = static_cast<double>(be.kernel_launches() - launches_before) / static_cast<double>(a.steps);
  // The same steps queued back to back, as a decode loop that fed each step's ids to the next on the device would run
  // them: the host prepares step i + 1 (its tables, into the other half of the pinned buffer) while the GPU runs step
  // i, so a step costs the larger of the two. Rounds of --steps steps; each gives the mean of its steps.
  std::vector<double> queued_samples;
  for (int r = 0; r < kQueuedRounds; ++r) {
    be.synchronize();
    const auto start = Clock::now();
    for (int64_t i = 0; i < a.steps; ++i) step();
    be.synchronize();
    queued_samples.push_back(seconds_since(start) / static_cast<double>(a.steps));
  }
  const double s = median(samples), host_s = median(host_samples), queued_s = median(queued_samples);
  const bool graphed = graphs.last_replayed();
  // Timed step i reads the KV of context + warmup + i earlier positions and writes one: on average this many.
  const double positions = static_cast<double>(a.context + a.warmup) + static_cast<double>(a.steps - 1) / 2.0 + 1.0;
  const StepBytes bytes = decode_step_bytes(ctx.config, counts, be.kv_dtype(), B, positions);
  const double floor = bytes.total() / ctx.copy_bandwidth;
  // The queued steps come after the timed ones and read kQueuedRounds * steps more positions: their own floor.
  const double queued_positions = positions + static_cast<double>((1 + kQueuedRounds) * a.steps) / 2.0;
  const StepBytes queued_bytes = decode_step_bytes(ctx.config, counts, be.kv_dtype(), B, queued_positions);
  const double queued_floor = queued_bytes.total() / ctx.copy_bandwidth;
  ctx.rows.push_back({"decode step", fmt::format("B={}, past {}", B, a.context), human_time(s),
                      fmt::format("{:.1f} tok/s, {:.0f} kernels{}, host {}", static_cast<double>(B) / s, launches,
                                  graphed ? " in a graph" : "", human_time(host_s)),
                      human_bytes(bytes.total()), human_time(floor), percent(floor / s)});
  ctx.rows.push_back({"decode queued", fmt::format("B={}, past {}", B, a.context), human_time(queued_s),
                      fmt::format("{:.1f} tok/s, steps queued back to back", static_cast<double>(B) / queued_s),
                      human_bytes(queued_bytes.total()), human_time(queued_floor), percent(queued_floor / queued_s)});
  ctx.out["decode"].push_back({{"batch", B},
                               {"past_tokens", a.context},
                               {"mean_kv_positions_read", positions},
                               {"step_s_median", s},
                               {"tokens_per_s", static_cast<double>(B) / s},
                               {"kernel_launches_per_step", launches},
                               {"graph_replayed", graphed},
                               {"host_issue_s_median", host_s},
                               {"bytes",
                                {{"dense_weights", bytes.dense},
                                 {"experts_touched_per_layer", bytes.experts_touched},
                                 {"routed_experts", bytes.experts},
                                 {"embedding_rows", bytes.embedding},
                                 {"recurrent_state", bytes.recurrent},
                                 {"conv_state", bytes.conv},
                                 {"kv_cache", bytes.kv},
                                 {"total", bytes.total()}}},
                               {"floor_s", floor},
                               {"fraction_of_floor", floor / s},
                               {"samples_s", samples},
                               {"queued_step_s_median", queued_s},
                               {"queued_floor_s", queued_floor},
                               {"queued_fraction_of_floor", queued_floor / queued_s},
                               {"queued_samples_s", queued_samples}});
}

void bench_prefill(Context& ctx, const Qwen3NextModel& model, const WeightCounts& counts, int64_t T) {
  Backend& be = ctx.be;
  TokenStream tokens(ctx.config.vocab_size, ctx.args.seed + 1000 + static_cast<uint64_t>(T));
  const std::vector<int32_t> ids = tokens.take(T);
  {  // warm-up: the first run at a length also sizes the memory pool for it
    SequenceState s = model.new_sequence(T);
    model.forward(s, ids, LogitsRows::kLast, GdnAlgorithm::kChunked);
  }
  std::vector<double> samples;
  for (int64_t r = 0; r < ctx.args.prefill_repeats; ++r) {
    SequenceState s = model.new_sequence(T);
    be.synchronize();
    const auto start = Clock::now();
    model.forward(s, ids, LogitsRows::kLast, GdnAlgorithm::kChunked);
    be.synchronize();
    samples.push_back(seconds_since(start));
  }
  const double s = median(samples), flops = prefill_flops(ctx.config, counts, T);
  std::optional<double> floor;
  if (ctx.tensor_rate) floor = flops / *ctx.tensor_rate;
  ctx.rows.push_back({"prefill", fmt::format("T={}", T), human_time(s),
                      fmt::format("{:.0f} tok/s, {}", static_cast<double>(T) / s, flop_rate(flops / s)),
                      human_flops(flops), floor ? human_time(*floor) : "", floor ? percent(*floor / s) : ""});
  ctx.out["prefill"].push_back({{"tokens", T},
                                {"median_s", s},
                                {"tokens_per_s", static_cast<double>(T) / s},
                                {"matmul_flops", flops},
                                {"tflops_per_s", flops / s / 1e12},
                                {"floor_s", floor ? json(*floor) : json(nullptr)},
                                {"fraction_of_floor", floor ? json(*floor / s) : json(nullptr)},
                                {"samples_s", samples}});
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
void bench_gdn_decode(Context& ctx, const GdnWeights& w, int64_t B) {
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
  const std::vector<double> samples = time_calls(be, ctx.args.kernel_repeats, n_sets, [&](int64_t i) {
    Set& s = sets[static_cast<size_t>(i)];
    be.gated_delta_rule(s.qkv, c.linear_num_key_heads, s.a, s.b, w.A_log, w.dt_bias, s.state_ptrs, batch, s.o,
                        GdnAlgorithm::kRecurrent);
  });
  json result = bytes_result(ctx, "kernel gdn decode", fmt::format("B={}", B), median(samples), bytes, samples);
  result["batch"] = B;
  ctx.out["kernels"]["gdn_decode"].push_back(result);
}

// The delta rule's chunked form over one sequence of T tokens, one layer.
void bench_gdn_prefill(Context& ctx, const GdnWeights& w, int64_t T) {
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
  const std::vector<double> samples = time_calls(be, ctx.args.kernel_repeats, 1, [&](int64_t) {
    be.gated_delta_rule(qkv, c.linear_num_key_heads, a, b, w.A_log, w.dt_bias, states, batch, o,
                        GdnAlgorithm::kChunked);
  });
  const double s = median(samples);
  // Bytes: q, k, v, a and b read, o written, the state read and written once.
  const double bytes =
      4.0 * (static_cast<double>(T * (c.conv_dim() + 2 * nv + nv * dv)) + 2.0 * static_cast<double>(nv * dk * dv));
  const bool fla_shape = T == 16384 && c.linear_num_key_heads == 16 && nv == 32 && dk == 128 && dv == 128;
  const std::string what = fla_shape ? fmt::format("kernel gdn prefill (FLA {:.2f} ms: {:.2f}x)", kFlaPrefill16kMs,
                                                   kFlaPrefill16kMs * 1e-3 / s)
                                     : std::string("kernel gdn prefill");
  json result = bytes_result(ctx, what, fmt::format("T={}, chunked", T), s, bytes, samples);
  result["tokens"] = T;
  result["fla_16k_ms"] = fla_shape ? json(kFlaPrefill16kMs) : json(nullptr);
  result["speedup_over_fla"] = fla_shape ? json(kFlaPrefill16kMs * 1e-3 / s) : json(nullptr);
  ctx.out["kernels"]["gdn_prefill"] = result;
}

// Decode attention of B sequences of one layer, each over `past` cached positions plus its new one.
void bench_attention_decode(Context& ctx, int64_t B, int64_t past) {
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
  const std::vector<double> samples = time_calls(be, ctx.args.kernel_repeats, n_sets, [&](int64_t i) {
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
void bench_attention_prefill(Context& ctx, int64_t T) {
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
  const std::vector<double> samples = time_calls(be, ctx.args.kernel_repeats, 1, [&](int64_t) {
    be.attention(q, k, v, caches, batch, o, GdnAlgorithm::kChunked);
  });
  // QKᵀ and PV over the T(T+1)/2 causal query-key pairs of every query head.
  const double flops = 2.0 * static_cast<double>(nq * d) * static_cast<double>(T) * static_cast<double>(T + 1);
  ctx.out["kernels"]["attention_prefill"] =
      flops_result(ctx, "kernel attention prefill", fmt::format("T={}", T), median(samples), flops, samples);
}

// The routed experts of one MoE layer over T tokens (gate, up and down products of top_k experts per token).
void bench_moe_experts(Context& ctx, const MoeWeights& w, int64_t T) {
  const ModelConfig& c = ctx.config;
  Backend& be = ctx.be;
  const int64_t H = c.hidden_size, E = c.num_experts, k = c.num_experts_per_tok;
  Tensor x = random_tensor(be, DType::kF32, {T, H}, 501);       // [T, H]
  Tensor logits = random_tensor(be, DType::kF32, {T, E}, 502);  // [T, E] router logits
  Tensor expert_ids = be.empty(DType::kI32, {T, k});            // [T, top_k]
  Tensor expert_weights = be.empty(DType::kF32, {T, k});        // [T, top_k]
  be.moe_route(logits, k, c.norm_topk_prob, expert_ids, expert_weights);
  Tensor y = be.empty(DType::kF32, {T, H});  // [T, H]
  const std::vector<double> samples = time_calls(
      be, ctx.args.kernel_repeats, 1, [&](int64_t) { be.moe_experts(x, expert_ids, expert_weights, w.experts, y); });
  const double flops = 2.0 * static_cast<double>(T * k) * 3.0 * static_cast<double>(c.moe_intermediate_size * H);
  ctx.out["kernels"]["moe_experts_prefill"] = flops_result(
      ctx, "kernel moe experts", fmt::format("T={}, top {} of {}", T, k, E), median(samples), flops, samples);
}

// One dense projection of a prefill: x [T, K] times w [N, K]ᵀ.
void bench_linear(Context& ctx, const Tensor& w, const std::string& name, int64_t T) {
  Backend& be = ctx.be;
  const int64_t N = w.dim(0), K = w.dim(1);
  Tensor x = random_tensor(be, DType::kF32, {T, K}, 601);  // [T, K]
  Tensor y = be.empty(DType::kF32, {T, N});                // [T, N]
  const std::vector<double> samples = time_calls(be, ctx.args.kernel_repeats, 1, [&](int64_t) { be.linear(x, w, y); });
  const double flops = 2.0 * static_cast<double>(T) * static_cast<double>(N) * static_cast<double>(K);
  ctx.out["kernels"]["linear_prefill"] = flops_result(
      ctx, "kernel linear " + name, fmt::format("[{}, {}] x [{}, {}]T", T, K, N, K), median(samples), flops, samples);
}

void bench_kernels(Context& ctx, const ModelWeights& weights, int64_t max_prefill) {
  const ModelConfig& c = ctx.config;
  const std::vector<int64_t> batches = parse_sizes(ctx.args.kernel_batches, "--kernel-batches");
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

void run_bench(const BenchArgs& a) {
  PLUMB_CHECK(a.synthetic, "bench needs --synthetic (it runs on generated weights; model folders are not supported)");
  PLUMB_CHECK(a.context >= 1, "--context must be at least 1, got {}", a.context);
  PLUMB_CHECK(a.steps >= 1 && a.warmup >= 0, "--steps must be at least 1 and --warmup at least 0");
  PLUMB_CHECK(a.prefill_repeats >= 1 && a.kernel_repeats >= 1, "--prefill-repeats and --kernel-repeats must be >= 1");
  PLUMB_CHECK(a.tensor_rate_tflops >= 0, "--tensor-rate-tflops must not be negative");
  PLUMB_CHECK(std::isfinite(a.draw.temperature) && a.draw.temperature >= 0.0f &&
                  (a.draw.temperature == 0.0f || std::isfinite(1.0f / a.draw.temperature)),
              "--temperature must be 0 or a finite positive number, got {}", a.draw.temperature);
  PLUMB_CHECK(a.draw.top_k >= 0, "--top-k must not be negative, got {}", a.draw.top_k);
  PLUMB_CHECK(a.draw.top_p > 0.0f && a.draw.top_p <= 1.0f, "--top-p must be in (0, 1], got {}", a.draw.top_p);
  const std::vector<int64_t> batches = parse_sizes(a.batches, "--batches");
  const std::vector<int64_t> prefills = parse_sizes(a.prefill, "--prefill");
  const std::vector<int64_t> speculative =
      a.speculative_tokens.empty() ? std::vector<int64_t>{} : parse_sizes(a.speculative_tokens, "--speculative-tokens");
  for (int64_t k : speculative)
    PLUMB_CHECK(k <= kMaxSpeculativeTokens, "--speculative-tokens: {} is above {}", k, kMaxSpeculativeTokens);
  PLUMB_CHECK(std::isfinite(a.acceptance_length) && a.acceptance_length >= 1.0,
              "--acceptance-length must be at least 1, got {}", a.acceptance_length);
  parse_sizes(a.kernel_batches, "--kernel-batches");  // fail on a bad list before the long setup
  const SyntheticConfig synthetic = synthetic_config(a.model);
  const SyntheticWeights weights = parse_synthetic_weights(a.weights);
  const ModelConfig& c = synthetic.config;

  const auto backend = make_backend(a.device);
  Backend& be = *backend;
  Context ctx(a, be, c);
  if (a.tensor_rate_tflops > 0) ctx.tensor_rate = a.tensor_rate_tflops * 1e12;
  json& out = ctx.out;
  out["benchmark"] = "plumb bench";
  out["model"] = a.model;
  out["description"] = synthetic.description;
  out["reduced"] = !synthetic.reduction.empty();
  out["reduction"] = synthetic.reduction;
  out["weights_format"] = synthetic_weights_name(weights);
  out["config"] = config_json(c);
  out["device"] = a.device;
  out["device_name"] = device_name(a, be);
  out["date"] = utc_now();
  out["commit"] = a.commit.empty() ? json(nullptr) : json(a.commit);
  out["options"] = {{"batches", batches},
                    {"prefill", prefills},
                    {"context", a.context},
                    {"steps", a.steps},
                    {"warmup", a.warmup},
                    {"prefill_repeats", a.prefill_repeats},
                    {"kernel_repeats", a.kernel_repeats},
                    {"seed", a.seed},
                    {"draw", {{"temperature", a.draw.temperature}, {"top_k", a.draw.top_k}, {"top_p", a.draw.top_p}}},
                    {"tensor_rate_tflops", ctx.tensor_rate ? json(a.tensor_rate_tflops) : json(nullptr)}};
  out["formulas"] = {
      {"floor",
       "bytes / copy bandwidth (memory-bound) or FLOPs / tensor rate (compute-bound); fraction = floor / time"},
      {"copy_bandwidth", "(bytes read + bytes written) of one device-to-device copy / its median time"},
      {"decode_bytes",
       "dense weights (all layer weights but routed experts, final norm, lm_head) + MoE layers * experts touched * "
       "bytes per expert + B embedding rows + recurrent 2*4*nv*dk*dv*GDN*B + conv 2*4*C*(K-1)*GDN*B + KV "
       "positions*2*nkv*d*kv_bytes*attention*B, positions = mean KV positions read per timed step"},
      {"experts_touched", "E * (1 - (1 - top_k/E)^B), the expected distinct experts of B uniform top-k draws"},
      {"prefill_flops",
       "2*T*(layer matrix params excluding routed experts + MoE layers*top_k*3*I*H) + 2*lm_head params + "
       "attention 2*nq*d*T*(T+1) per layer; GDN core excluded"},
      {"timing", "wall clock between backend.synchronize() calls, median; includes host launch overhead"},
      {"decode_graphs", !a.no_graphs}};

  fmt::print("model      {} ({}), {} weights\n", a.model, synthetic.description, synthetic_weights_name(weights));
  if (!synthetic.reduction.empty()) fmt::print("REDUCED    {}\n", synthetic.reduction);
  fmt::print("device     {} ({})\n", out["device_name"].get<std::string>(), a.device);

  measure_copy(ctx);
  const auto build_start = Clock::now();
  const Qwen3NextModel model = synthetic_model(c, be, a.seed, weights, /*mtp=*/!speculative.empty());
  be.synchronize();
  const WeightCounts counts = count_weights(c, model.weights());
  const double build_s = seconds_since(build_start);
  fmt::print("weights    {} allocated and filled on the device in {}\n", human_bytes(counts.total_bytes),
             human_time(build_s));
  out["weights"] = {{"total_bytes", counts.total_bytes},
                    {"dense_bytes", counts.dense_bytes},
                    {"bytes_per_expert", counts.expert_bytes},
                    {"moe_layers", counts.moe_layers},
                    {"build_s", build_s}};

  out["decode"] = json::array();
  for (int64_t B : batches) bench_decode(ctx, model, counts, B);
  out["speculative"] = json::array();
  for (int64_t B : batches)
    for (int64_t k : speculative)
      bench_speculative(ctx, model, counts, B, k, std::min(a.acceptance_length, static_cast<double>(k + 1)));
  out["prefill"] = json::array();
  for (int64_t T : prefills) bench_prefill(ctx, model, counts, T);
  out["kernels"] = json::object();
  if (!a.skip_kernels) bench_kernels(ctx, model.weights(), *std::max_element(prefills.begin(), prefills.end()));

  fmt::print("\n");
  print_table(ctx.rows);
  fmt::print("\nfloor: bytes / copy bandwidth measured above ({}){}; of floor = floor / time.\n",
             bandwidth(ctx.copy_bandwidth),
             ctx.tensor_rate ? fmt::format(", or FLOPs / {} TFLOP/s", a.tensor_rate_tflops) : std::string());
  fmt::print(
      "decode bytes: every weight but the routed experts, E*(1-(1-k/E)^B) experts per MoE layer, recurrent and "
      "conv state read + written, KV read.\n");
  fmt::print("times: medians of wall clock between synchronizations, host work included; decode steps {}.\n",
             a.no_graphs ? "eager (--no-graphs)" : "replayed from recorded graphs where the backend records them");
  fmt::print(
      "decode queued: --steps steps queued with no synchronization between them (the host readies each next step "
      "while the GPU runs the one before), median of {} rounds' mean step.\n",
      kQueuedRounds);
  if (!speculative.empty())
    fmt::print(
        "speculative step: a step of a drafting runner as plumb serve runs it (MTP head drafts, one verifying call, "
        "the rollback of rows not kept), eager, synchronized; the kept rows are set to the acceptance length; "
        "tok/s = B * tokens kept a step / step; of floor = a plain step's floor / (step / tokens kept a step).\n");
  if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    PLUMB_CHECK(f.good(), "cannot write {}", a.json_path);
    f << out.dump(2) << "\n";
    fmt::print("wrote {}\n", a.json_path);
  }
}

}  // namespace

void register_bench_commands(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand("bench", "Time decode, prefill and kernels on a synthetic model");
  bench->add_flag("--synthetic", args->synthetic, "use random weights of the named model's shapes");
  std::string names;
  for (const std::string& n : synthetic_config_names()) names += (names.empty() ? "" : ", ") + n;
  bench->add_option("--model", args->model, "synthetic model: " + names)->required();
  bench->add_option("--device", args->device, kDeviceHelp);
  bench->add_option("--weights", args->weights,
                    "projection weights: bf16, or fp8 (E4M3 with a multiplier per row and 128-wide K-slice, as the "
                    "published FP8 checkpoints quantize them)");
  bench->add_option("--batches", args->batches, "decode batch sizes, comma-separated");
  bench->add_option("--prefill", args->prefill, "prefill lengths, comma-separated; the longest also sizes the kernels");
  bench->add_option("--context", args->context, "tokens each sequence holds before the timed decode steps");
  bench->add_option("--steps", args->steps, "timed decode steps per batch size");
  bench->add_option("--warmup", args->warmup, "untimed decode steps before them");
  bench->add_option("--prefill-repeats", args->prefill_repeats, "timed runs per prefill length");
  bench->add_option("--kernel-batches", args->kernel_batches, "batch sizes of the decode kernels");
  bench->add_option("--kernel-repeats", args->kernel_repeats, "timed samples per kernel");
  bench->add_flag("--skip-kernels", args->skip_kernels, "time only the whole model");
  bench->add_flag("--no-graphs", args->no_graphs, "run decode steps eagerly instead of replaying recorded graphs");
  bench->add_flag("--profile-last-step", args->profile_last_step,
                  "open the CUDA profiler's range around each batch's last decode step (ncu --profile-from-start off)");
  bench->add_option("--copy-mib", args->copy_mib, "copy-bandwidth buffer in MiB (default 2048; 64 on the cpu)");
  bench->add_option("--tensor-rate-tflops", args->tensor_rate_tflops, "tensor-core rate for compute floors");
  bench->add_option("--seed", args->seed, "seed of the synthetic weights and token ids");
  bench->add_option("--temperature", args->draw.temperature, "each decode step's token draw (0: greedy)");
  bench->add_option("--top-k", args->draw.top_k, "the draw's top-k (0: off)");
  bench->add_option("--top-p", args->draw.top_p, "the draw's top-p (1: off)");
  bench->add_option("--speculative-tokens", args->speculative_tokens,
                    "also time speculative decode steps drafting this many tokens, comma-separated (1-8)");
  bench->add_option("--acceptance-length", args->acceptance_length,
                    "tokens a speculative step keeps on average (capped at k + 1; 3.39: Qwen3.5's measured at k = 3)");
  bench->add_option("--json", args->json_path, "write every number to this JSON file");
  bench->add_option("--device-name", args->device_name, "the device's name for the report");
  bench->add_option("--commit", args->commit, "the git commit measured, for the report");
  bench->callback([args] { run_bench(*args); });
}

}  // namespace plumb::cli
