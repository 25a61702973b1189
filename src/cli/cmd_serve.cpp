// plumb serve: the OpenAI-compatible HTTP server over one model folder (or a synthetic model), with continuous
// batching.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/device.h"
#include "cli/model_choice.h"
#include "cli/parse.h"
#include "cli/serve_memory.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/speculative.h"
#include "engine/split_runner.h"
#include "model/kv_pages.h"
#include "server/prompt.h"
#include "server/server.h"

namespace plumb::cli {
namespace {

constexpr int kMaxTensorParallel = 64;
// How long a rank waits in a collective for the others before the ranks stop (a rank that died or hung).
constexpr std::chrono::milliseconds kTensorParallelTimeout{120000};

struct ServeArgs {
  ModelChoice model;
  std::string host = "127.0.0.1", device = "cpu", api_key, served_model_name, allowed_origins;
  bool metrics_need_key = false, check_weights = false, no_graphs = false;
  std::string graph_buckets;  // "": powers of two up to --max-batch, and --max-batch
  uint16_t port = 8000;
  int32_t max_batch = 32;
  int64_t max_queue = 256;
  int64_t prefill_chunk = 64;  // the chunked delta rule's chunk, so prefill calls split no chunk
  int64_t speculative_tokens = 0;
  int64_t draft_vocab = 0;       // --draft-vocab: MtpDrafter's vocabulary (0: every id)
  bool adaptive_drafts = false;  // --adaptive-drafts: each step's drafts chosen by DraftPolicy, up to the tokens
  int64_t kv_pages = 0;          // pages of kKvPageSize positions; 0: from kv_cache_gib, or a full context per slot
  double kv_cache_gib = 0.0;     // memory reserved for the KV cache at start; 0: pages allocated as sequences grow
  double gpu_memory_utilization = 0.90;    // of the GPU memory free after the weights: what serving may reserve
  std::optional<double> prefix_cache_gib;  // unset: the default (ServeMemoryOptions)
  bool no_prefix_cache = false, no_prefix_cache_answers = false;
  int64_t prefix_cache_stride = kKvPageSize;
  int tensor_parallel = 1;             // ranks the model is split over (CPU ranks: threads of this process)
  std::string tp_reduction = "exact";  // how the ranks' row-parallel products are reduced: exact or fast
  std::string log_format = "text";
  double log_interval = 5.0;  // seconds between throughput lines while busy
  server::HttpLimits http;    // connection caps; the timeouts below in seconds
  double request_timeout = http.request_timeout_ms / 1000.0, idle_timeout = http.idle_timeout_ms / 1000.0;
};

// The decode batch sizes recorded as graphs: --graph-buckets, else 1, 2, 4, ... up to --max-batch, and --max-batch.
StepGraphOptions graph_options(const ServeArgs& a) {
  StepGraphOptions options;
  options.enabled = !a.no_graphs;
  options.buckets.clear();
  if (a.graph_buckets.empty()) {
    for (int64_t b = 1; b < a.max_batch; b *= 2) options.buckets.push_back(b);
    options.buckets.push_back(a.max_batch);
  } else {
    options.buckets = parse_sizes(a.graph_buckets, "--graph-buckets");
    std::sort(options.buckets.begin(), options.buckets.end());
    options.buckets.erase(std::unique(options.buckets.begin(), options.buckets.end()), options.buckets.end());
    PLUMB_CHECK(options.buckets.back() <= a.max_batch, "--graph-buckets: {} is above --max-batch {}",
                options.buckets.back(), a.max_batch);
  }
  return options;
}

// --tensor-parallel's limits, checked before the model loads.
void check_split_args(const ServeArgs& a) {
  PLUMB_CHECK(a.tensor_parallel >= 1 && a.tensor_parallel <= kMaxTensorParallel,
              "--tensor-parallel must be in 1..{}, got {}", kMaxTensorParallel, a.tensor_parallel);
  PLUMB_CHECK(a.tp_reduction == "exact" || a.tp_reduction == "fast", "--tp-reduction must be exact or fast, got '{}'",
              a.tp_reduction);
  if (a.tensor_parallel == 1) return;
  PLUMB_CHECK(a.device == "cpu",
              "--tensor-parallel {} --device {}: ranks run on the CPU for now (GPU ranks need NCCL, not built yet)",
              a.tensor_parallel, a.device);
  PLUMB_CHECK(a.prefix_cache_stride > 0 && a.prefix_cache_stride % kKvPageSize == 0,
              "--prefix-cache-stride {}: the stride must be a positive multiple of {} tokens", a.prefix_cache_stride,
              kKvPageSize);
  // A rank holds a share of the lm_head's rows, not the vocabulary's first ids.
  PLUMB_CHECK(a.draft_vocab == 0, "--tensor-parallel {}: --draft-vocab drafts on one device only", a.tensor_parallel);
  PLUMB_CHECK(a.kv_cache_gib == 0.0, "--tensor-parallel {}: KV pages are counted with --kv-pages, not --kv-cache-gib",
              a.tensor_parallel);
}

// The model split over a.tensor_parallel CPU ranks, threads of this process (engine/split_runner.h), each holding its
// share of the model's heads, widths, experts and vocabulary; memory as on the CPU without a split: pages allocated as
// sequences grow, up to a full context for every slot (or --kv-pages), and the prefix cache's budget shared by the
// ranks, each keeping its share of every kept state.
std::unique_ptr<Runner> split_runner(const ServeArgs& a, const Qwen3NextModel& model, ServeMemory& memory) {
  const parallel::RowReduction reduction =
      a.tp_reduction == "exact" ? parallel::RowReduction::kExact : parallel::RowReduction::kSum;
  const double cache_gib =
      a.no_prefix_cache ? 0.0 : a.prefix_cache_gib.value_or(kDefaultCpuPrefixCacheGib) / a.tensor_parallel;
  const SplitModelOptions options{.prefix_cache_bytes = cache_gib * static_cast<double>(1ull << 30),
                                  .prefix_cache_stride = a.prefix_cache_stride,
                                  .drafting = a.speculative_tokens > 0};
  auto runner =
      std::make_unique<SplitRunner>(a.tensor_parallel, kTensorParallelTimeout, [&](parallel::Collective& collective) {
        return split_model_runner(collective, make_backend("cpu"), model.config(), model.weights(), reduction,
                                  a.max_batch, options);
      });
  memory.kv_pages = a.kv_pages > 0 ? a.kv_pages : a.max_batch * kv_pages_for(runner->max_context());
  memory.summary = fmt::format(
      "plumb serve: the model split over {} CPU ranks ({} reduction), {} sequence slots, {} KV pages of {} positions "
      "allocated as sequences grow, {}",
      a.tensor_parallel, a.tp_reduction, a.max_batch, memory.kv_pages, kKvPageSize,
      runner->keeps_prefixes() ? fmt::format("a prefix cache of {:.3g} GiB a rank", cache_gib) : "no prefix cache");
  return runner;
}

void run_serve(const ServeArgs& a) {
  // SIGINT and SIGTERM are blocked in every thread (new threads inherit the mask) and taken by one watcher thread,
  // so shutdown runs as ordinary code rather than in a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Checked before the model loads, which can take minutes.
  const server::LogFormat log_format = server::parse_log_format(a.log_format);
  PLUMB_CHECK(a.log_interval >= 0.0 && a.log_interval <= 86400.0,
              "--log-interval must be in [0, 86400] seconds, got {}", a.log_interval);
  PLUMB_CHECK(
      std::isfinite(a.gpu_memory_utilization) && a.gpu_memory_utilization > 0.0 && a.gpu_memory_utilization <= 1.0,
      "--gpu-memory-utilization must be in (0, 1], got {}", a.gpu_memory_utilization);
  PLUMB_CHECK(a.speculative_tokens >= 0 && a.speculative_tokens <= kMaxSpeculativeTokens,
              "--speculative-tokens must be in 0..{}, got {}", kMaxSpeculativeTokens, a.speculative_tokens);
  PLUMB_CHECK(!a.adaptive_drafts || a.speculative_tokens > 0, "--adaptive-drafts needs --speculative-tokens K");
  check_draft_vocab(a.model.config(), a.draft_vocab, a.speculative_tokens);
  check_split_args(a);
  const auto backend = make_backend(a.device);
  // Quiet: stderr is the server's log, and a budget refused after the load stays its one line.
  LoadOptions load;
  load.check_weights = a.check_weights;
  load.mtp = a.speculative_tokens > 0;
  const Qwen3NextModel model = a.model.open(*backend, load, /*quiet=*/true);
  const server::ModelText text =
      a.model.is_synthetic() ? server::ModelText::token_ids_only(fmt::format(
                                   "plumb serve --synthetic {}: random weights, no tokenizer", a.model.synthetic))
                             : server::ModelText::from_dir(a.model.dir);
  PLUMB_CHECK(a.max_batch >= 1, "--max-batch must be >= 1, got {}", a.max_batch);
  SchedulerConfig scheduler;
  scheduler.max_running = a.max_batch;
  scheduler.max_waiting = a.max_queue;
  scheduler.prefill_chunk = a.prefill_chunk;
  // Every decoding sequence's token and drafts, and room for prefill chunks beside them.
  scheduler.speculative_tokens = a.speculative_tokens;
  scheduler.step_tokens = a.max_batch * (1 + a.speculative_tokens) + 4 * a.prefill_chunk;
  // The scheduler counts the model's own pages, so what it admits is what the pool holds.
  scheduler.kv_page_tokens = kKvPageSize;
  PLUMB_CHECK(!a.prefix_cache_gib || (std::isfinite(*a.prefix_cache_gib) && *a.prefix_cache_gib >= 0.0),
              "--prefix-cache-gib must be a finite number of GiB, 0 or more, got {}", a.prefix_cache_gib.value_or(0.0));
  PLUMB_CHECK(!a.no_prefix_cache || !a.prefix_cache_gib, "--no-prefix-cache and --prefix-cache-gib {} disagree",
              a.prefix_cache_gib.value_or(0.0));
  std::unique_ptr<Runner> runner;
  ServeMemory memory;
  if (a.tensor_parallel != 1) {
    runner = split_runner(a, model, memory);
  } else {
    auto model_runner = std::make_unique<ModelRunner>(model, a.max_batch, graph_options(a));
    if (a.speculative_tokens > 0) model_runner->enable_drafting(std::make_unique<MtpDrafter>(model, a.draft_vocab));
    memory = reserve_serve_memory({a.device, a.max_batch, static_cast<int32_t>(a.speculative_tokens),
                                   scheduler.step_tokens, a.kv_pages, a.kv_cache_gib, a.gpu_memory_utilization,
                                   a.no_prefix_cache ? 0.0 : a.prefix_cache_gib.value_or(-1.0), a.prefix_cache_stride},
                                  model, *model_runner, model_runner->max_context());
    if (memory.prefix_cache.snapshots > 0) model_runner->enable_prefix_cache(memory.prefix_cache);
    runner = std::move(model_runner);
  }
  scheduler.kv_pages = memory.kv_pages;
  Engine engine(*runner, scheduler,
                EngineOptions{.prefill_answers = !a.no_prefix_cache_answers, .adaptive_drafts = a.adaptive_drafts});

  server::ServerOptions options;
  options.host = a.host;
  options.port = a.port;
  options.api_key = a.api_key;
  options.log_format = log_format;
  options.log_interval = std::chrono::milliseconds(static_cast<int64_t>(a.log_interval * 1000.0));
  options.allowed_origins = server::parse_allowed_origins(a.allowed_origins);
  options.metrics_need_key = a.metrics_need_key;
  options.limits = a.http;
  PLUMB_CHECK(a.request_timeout > 0 && a.idle_timeout > 0, "--request-timeout and --idle-timeout must be > 0");
  options.limits.request_timeout_ms = static_cast<int>(std::min(a.request_timeout * 1000.0, 1e9));
  options.limits.idle_timeout_ms = static_cast<int>(std::min(a.idle_timeout * 1000.0, 1e9));
  options.model_name = a.served_model_name.empty() ? a.model.name() : a.served_model_name;
  server::Server server(engine, text, options);
  std::printf("plumb serve: listening on http://%s:%u (model \"%s\", device %s, max batch %d)\n", a.host.c_str(),
              static_cast<unsigned>(server.port()), options.model_name.c_str(), a.device.c_str(), a.max_batch);
  std::printf("%s\n", memory.summary.c_str());
  std::fflush(stdout);

  std::thread watcher([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    server.stop();  // no new connections or requests
    engine.stop();  // in-flight requests end; their handlers answer and return
  });
  server.run();
  watcher.join();
}

}  // namespace

void register_serve_commands(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* serve = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  args->model.add_options(*serve, std::string(kModelHelp) + ", with tokenizer.json");
  serve->add_option("--host", args->host, "address to listen on");
  serve->add_option("--port", args->port, "port to listen on (0: any free port)");
  serve->add_option("--device", args->device, kDeviceHelp);
  serve->add_option("--max-batch", args->max_batch, "sequences running at once");
  serve->add_option("--max-queue", args->max_queue, "requests waiting at most; more get 429");
  serve->add_option("--max-connections", args->http.max_connections,
                    "open connections in all; more are answered 503 and closed");
  serve->add_option("--max-client-connections", args->http.max_client_connections,
                    "open connections from one client address; more are answered 429 and closed");
  serve->add_option("--request-timeout", args->request_timeout,
                    "seconds a request's header and body may take to arrive; a slower one gets 408");
  serve->add_option("--idle-timeout", args->idle_timeout, "seconds a keep-alive connection may sit idle");
  serve->add_option("--http-workers", args->http.workers,
                    "threads running requests (streams hold one each); more complete requests wait");
  serve->add_option("--prefill-chunk", args->prefill_chunk, "prompt tokens a sequence runs per step");
  serve->add_option("--speculative-tokens", args->speculative_tokens, kSpeculativeTokensHelp);
  serve->add_option("--draft-vocab", args->draft_vocab, kDraftVocabHelp);
  serve->add_flag("--adaptive-drafts", args->adaptive_drafts,
                  "with --speculative-tokens K: give each step's decoding requests the drafts (0 to K) whose steps "
                  "made the most tokens a second at that batch size, as measured while serving");
  serve->add_option("--kv-pages", args->kv_pages,
                    "KV-cache pages of 64 positions, reserved at start (0: from --kv-cache-gib, else a full context "
                    "for every sequence, allocated as they grow)");
  serve->add_option("--kv-cache-gib", args->kv_cache_gib, "GiB of KV-cache pages to reserve at start");
  serve->add_option("--gpu-memory-utilization", args->gpu_memory_utilization,
                    "share of the GPU memory free after the weights that serving reserves at start: state slots, "
                    "step memory, and KV pages in the rest (unless --kv-pages or --kv-cache-gib)");
  serve->add_option("--prefix-cache-gib", args->prefix_cache_gib,
                    "memory for the prefix cache, which keeps prompts' states at 64-token boundaries so a request that "
                    "starts with a kept prompt runs only the rest (default: a tenth of what the state slots and step "
                    "memory leave of the GPU budget, 1 GiB on the CPU)");
  serve->add_option("--prefix-cache-stride", args->prefix_cache_stride,
                    "tokens between the prompt states the prefix cache keeps, a multiple of 64 (and always the "
                    "prompt's last 64-token boundary): longer keeps more prompts in the same memory, each resumed "
                    "from further back (default 64)");
  serve->add_flag("--no-prefix-cache", args->no_prefix_cache, "keep no prompt states (--prefix-cache-gib 0)");
  serve->add_flag("--no-prefix-cache-answers", args->no_prefix_cache_answers,
                  "keep prompts' states only: finished answers are not run again as prompts while the server is idle "
                  "(which keeps their states too, so a chat's next turn resumes after the answer)");
  serve->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' on /v1 requests");
  serve->add_option("--allowed-origins", args->allowed_origins,
                    "origins a browser app may call from (CORS), comma-separated, e.g. https://app.example");
  serve->add_option("--tensor-parallel", args->tensor_parallel,
                    "ranks to split the model over (its heads, MLP widths, experts and vocabulary): threads of this "
                    "process on the CPU; 1 (the default) splits nothing");
  serve->add_option("--tp-reduction", args->tp_reduction,
                    "with --tensor-parallel: exact (every rank continues the products' fixed K-slice sums, so the "
                    "output is the unsplit model's, bit for bit) or fast (each rank's products summed in rank order)");
  serve->add_flag("--check-weights", args->check_weights, kCheckWeightsHelp);
  serve->add_flag("--no-graphs", args->no_graphs, "run decode steps eagerly instead of replaying recorded graphs");
  serve->add_option("--graph-buckets", args->graph_buckets,
                    "decode batch sizes recorded as graphs, comma-separated (default: 1, 2, 4, ... and --max-batch)");
  serve->add_flag("--metrics-need-key", args->metrics_need_key, "/metrics asks for --api-key too");
  serve->add_option("--served-model-name", args->served_model_name, "model id clients use (default: folder name)");
  serve->add_option("--log-format", args->log_format,
                    "stderr log of requests and throughput: text (key=value), json (one object a line) or none");
  serve->add_option("--log-interval", args->log_interval, "seconds between throughput lines while busy (0: none)");
  serve->callback([args] {
    args->model.resolve(args->check_weights, /*quiet=*/false);
    run_serve(*args);
  });
}

}  // namespace plumb::cli
