// plumb bench: decode, speculative decode and prefill speed of a model with synthetic weights, each stated against a
// floor counted from first principles (docs: exactness.md, "evidence for a speed claim"); the model's kernels one at a
// time are bench/kernels' (plumb_kernel_bench):
//
//   floor = bytes the work must move / device-to-device copy bandwidth measured in the same run
//   (or FLOPs / --tensor-rate-tflops for compute-bound work).
//
// A benchmark, not a test: it prints one table and writes the numbers as JSON, and asserts nothing about speed.
// Timings are wall-clock between backend.synchronize() calls, so they include the host's work.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench_common.h"
#include "cli/bench_constrained.h"
#include "cli/bench_speculative.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/parse.h"
#include "core/error.h"
#include "engine/runner.h"
#include "engine/speculative.h"
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

void run_bench(const BenchArgs& a) {
  PLUMB_CHECK(a.synthetic, "bench needs --synthetic (it runs on generated weights; model folders are not supported)");
  PLUMB_CHECK(a.context >= 1, "--context must be at least 1, got {}", a.context);
  PLUMB_CHECK(a.steps >= 1 && a.warmup >= 0, "--steps must be at least 1 and --warmup at least 0");
  PLUMB_CHECK(a.prefill_repeats >= 1, "--prefill-repeats must be at least 1, got {}", a.prefill_repeats);
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
  check_draft_vocab(synthetic_config(a.model).config, a.draft_vocab,
                    speculative.empty() ? 0 : *std::max_element(speculative.begin(), speculative.end()));
  PLUMB_CHECK(std::isfinite(a.acceptance_length) && a.acceptance_length >= 1.0,
              "--acceptance-length must be at least 1, got {}", a.acceptance_length);
  PLUMB_CHECK(a.constrained.empty() || a.device != "cpu",
              "--constrained times the runner's own draws with allowed tokens, which only a GPU runner makes (use "
              "--device cuda)");
  // The grammar's vocabulary is read first, so a folder without a tokenizer fails before the long run.
  std::optional<server::ModelText> constrained_text;
  if (!a.constrained.empty()) constrained_text = server::ModelText::from_dir(a.constrained);
  const BenchSetup setup = set_up(a);
  const SyntheticWeights weights = setup.weights;
  const ModelConfig& c = setup.synthetic.config;
  Backend& be = *setup.backend;
  Context ctx(a, be, c);
  json& out = ctx.out;
  start_report(ctx, "plumb bench", setup.synthetic, weights);
  out["options"] = {{"batches", batches},
                    {"prefill", prefills},
                    {"context", a.context},
                    {"steps", a.steps},
                    {"warmup", a.warmup},
                    {"prefill_repeats", a.prefill_repeats},
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
  if (constrained_text) {
    server::StructuredOutputs outputs(*constrained_text, c.vocab_size);
    const server::StructuredOutput json_object{server::Json{{"type", "object"}}, "",           "",
                                               "--constrained's JSON object",    std::nullopt, std::nullopt};
    out["constrained"] = json::array();
    for (int64_t B : batches)
      bench_constrained(ctx, model, counts, B, outputs, json_object, constrained_text->eos_ids());
  }
  out["prefill"] = json::array();
  for (int64_t T : prefills) bench_prefill(ctx, model, counts, T);

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
  if (constrained_text)
    fmt::print(
        "runner step, constrained step: a serving runner's decode step (graphs replayed), unconstrained and with every "
        "row's draw kept to a JSON object grammar over {}'s vocabulary (masks made on the host while the device runs "
        "the step, then the draw), {} alternating rounds of each, synchronized; medians.\n",
        a.constrained, kConstrainedRounds);
  if (!speculative.empty())
    fmt::print(
        "speculative step: a step of a drafting runner as plumb serve runs it (MTP head drafts, one verifying call, "
        "the rollback of rows not kept by a swap of state slots), verifications replayed from a graph (unless "
        "--no-graphs), the head's steps eager, synchronized; the kept rows are set to the acceptance length; "
        "tok/s = B * tokens kept a step / step; of floor = a plain step's floor / (step / tokens kept a step); "
        "verification: the same steps with drafts given (no head on the device), the head's drafts the rest{}.\n",
        a.draft_vocab > 0 ? fmt::format("; drafts < {}: the same steps drafting among ids [0, {}) alone (each "
                                        "draft step reads those lm_head rows), at the same acceptance",
                                        a.draft_vocab, a.draft_vocab)
                          : std::string());
  write_json(a.json_path, out);
}

}  // namespace

void register_bench_commands(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand("bench", "Time decode and prefill on a synthetic model");
  bench->add_flag("--synthetic", args->synthetic, "use random weights of the named model's shapes");
  std::string names;
  for (const std::string& n : synthetic_config_names()) names += (names.empty() ? "" : ", ") + n;
  bench->add_option("--model", args->model, "synthetic model: " + names)->required();
  bench->add_option("--device", args->device, kDeviceHelp);
  bench->add_option("--weights", args->weights,
                    "projection weights: bf16, fp8 (E4M3 with a multiplier per row and 128-wide K-slice, as the "
                    "published FP8 checkpoints quantize them) or nvfp4 (packed E2M1 with an E4M3 scale per 16 k and a "
                    "weight scale, as NVIDIA's NVFP4 checkpoints)");
  bench->add_option("--batches", args->batches, "decode batch sizes, comma-separated");
  bench->add_option("--prefill", args->prefill, "prefill lengths, comma-separated");
  bench->add_option("--context", args->context, "tokens each sequence holds before the timed decode steps");
  bench->add_option("--steps", args->steps, "timed decode steps per batch size");
  bench->add_option("--warmup", args->warmup, "untimed decode steps before them");
  bench->add_option("--prefill-repeats", args->prefill_repeats, "timed runs per prefill length");
  bench->add_flag("--skip-kernels", args->skip_kernels,
                  "no effect (kernels are timed by plumb_kernel_bench); accepted so older command lines run");
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
  bench->add_option("--draft-vocab", args->draft_vocab,
                    "with --speculative-tokens: also time each speculative step drafting among the first N token ids "
                    "alone, at the same acceptance");
  bench->add_option("--constrained", args->constrained,
                    "also time decode steps whose every row keeps to a JSON object grammar over this folder's "
                    "tokenizer.json (structured output; needs --device cuda)");
  bench->add_option("--json", args->json_path, "write every number to this JSON file");
  bench->add_option("--device-name", args->device_name, "the device's name for the report");
  bench->add_option("--commit", args->commit, "the git commit measured, for the report");
  bench->callback([args] { run_bench(*args); });
}

}  // namespace plumb::cli
