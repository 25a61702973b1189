// plumb logits | generate | inspect: running a model folder from the command line.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/device.h"
#include "cli/load_progress.h"
#include "cli/model_choice.h"
#include "cli/model_report.h"
#include "cli/parse.h"
#include "cli/sampling_options.h"
#include "cli/timings.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/npy.h"
#include "engine/generate.h"
#include "model/state_hash.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace plumb::cli {
namespace {

void print_hash(const char* what, uint64_t hash) {
  std::printf("%s %016llx\n", what, static_cast<unsigned long long>(hash));
}

void print_state_hashes(const Qwen3NextModel& model, const SequenceState& state) {
  for (const auto& [what, hash] : state_hashes(model, state)) print_hash(what.c_str(), hash);
}

struct LogitsArgs {
  std::string model, ids, out, device = "cpu";
  bool hash = false;
  int64_t batch = 1;                           // sequences in each forward call: the asked one and batch - 1 companions
  int64_t prefill_chunk = 0;                   // tokens per forward call (0: the whole prompt at once)
  std::string record_routing, replay_routing;  // JSON files of every MoE layer's expert choices
};

// The companions of a --batch run: other prompts of other lengths drawn from the same ids, so the asked sequence
// shares every forward call with sequences that differ from it.
std::vector<int32_t> companion_piece(const std::vector<int32_t>& ids, int64_t companion, int64_t call, int64_t vocab) {
  const int64_t length = 1 + (companion * 37 + call * 11) % 90;
  std::vector<int32_t> piece(static_cast<size_t>(length));
  for (int64_t t = 0; t < length; ++t)
    piece[t] = static_cast<int32_t>((ids[(companion + t) % ids.size()] + companion * 131 + t) % vocab);
  return piece;
}

// Runs the prompt in pieces of --prefill-chunk tokens, each forward call shared with --batch - 1 companions (the
// asked sequence sits in the middle of the batch). Returns the asked sequence's logits [T, V] on the host.
Tensor prefill_logits(const Qwen3NextModel& model, const LogitsArgs& a, const std::vector<int32_t>& ids,
                      SequenceState& state) {
  PLUMB_CHECK(a.batch >= 1 && a.batch <= 256, "--batch {}: expected 1 to 256 sequences", a.batch);
  PLUMB_CHECK(a.prefill_chunk >= 0, "--prefill-chunk {}: expected a count of tokens >= 0", a.prefill_chunk);
  const int64_t T = static_cast<int64_t>(ids.size()), V = model.config().vocab_size;
  const int64_t chunk = a.prefill_chunk > 0 ? a.prefill_chunk : T;
  const size_t asked = static_cast<size_t>(a.batch / 2);
  std::vector<SequenceState> companions;
  for (int64_t j = 1; j < a.batch; ++j) companions.push_back(model.new_sequence());
  Tensor out = Tensor::zeros(DType::kF32, {T, V});  // [T, V]
  for (int64_t begin = 0, call = 0; begin < T; begin += chunk, ++call) {
    const int64_t end = std::min(T, begin + chunk);
    std::vector<SequenceInput> batch;
    for (size_t j = 0; j < companions.size(); ++j)
      batch.push_back({&companions[j], companion_piece(ids, static_cast<int64_t>(j) + 1, call, V)});
    batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(asked),
                 SequenceInput{&state, std::vector<int32_t>(ids.begin() + begin, ids.begin() + end)});
    const Tensor logits = model.backend().download(model.forward(batch, LogitsRows::kAll));  // [Σ rows, V]
    int64_t row = 0;
    for (size_t j = 0; j < asked; ++j) row += static_cast<int64_t>(batch[j].ids.size());
    std::memcpy(out.f32() + begin * V, logits.f32() + row * V, static_cast<size_t>((end - begin) * V) * sizeof(float));
  }
  return out;
}

// A routing trace to replay, read from the JSON file --record-routing wrote.
RoutingTrace read_routing(const std::string& path) {
  RoutingTrace trace;
  trace.mode = RoutingTrace::Mode::kReplay;
  std::ifstream in(path);
  PLUMB_CHECK(in.good(), "--replay-routing {}: cannot open the file", path);
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    trace.top_k = j.at("top_k").get<int64_t>();
    trace.calls = j.at("calls").get<std::vector<std::vector<int32_t>>>();
  } catch (const nlohmann::json::exception& e) {
    PLUMB_FAIL("{}: not a routing trace written by --record-routing: {}", path, e.what());
  }
  return trace;
}

void run_logits(const LogitsArgs& a) {
  const auto backend = make_backend(a.device);
  Qwen3NextModel model = open_model(a.model, *backend);
  const std::vector<int32_t> ids = parse_token_ids(a.ids, "--ids", model.config().vocab_size);
  PLUMB_CHECK((a.record_routing.empty() && a.replay_routing.empty()) || (a.batch == 1 && a.prefill_chunk == 0),
              "--record-routing and --replay-routing run the prompt alone in one call: drop --batch and "
              "--prefill-chunk");
  RoutingTrace trace = a.replay_routing.empty() ? RoutingTrace{} : read_routing(a.replay_routing);
  if (!a.record_routing.empty() || !a.replay_routing.empty()) model.set_routing_trace(&trace);
  // Pages on demand: with --batch and --prefill-chunk the sequence's pages interleave with its companions', which
  // the hashes must not see.
  SequenceState state = model.new_sequence();
  const Tensor logits = prefill_logits(model, a, ids, state);  // [T, V] on the host
  if (!a.record_routing.empty()) {
    std::ofstream out(a.record_routing);
    out << nlohmann::json{{"top_k", trace.top_k}, {"calls", trace.calls}}.dump() << "\n";
    PLUMB_CHECK(out.good(), "--record-routing {}: cannot write the file", a.record_routing);
  }
  if (!a.out.empty()) write_npy_f32(a.out, logits.f32(), logits.shape());
  if (a.hash) {
    print_hash("logits", tensor_hash(model.backend(), logits));
    print_state_hashes(model, state);
  }
}

struct GenerateArgs {
  ModelChoice model;
  std::string ids, prompt, chat, device = "cpu", stop_ids;
  int64_t max_tokens = 32;
  int64_t speculative_tokens = 0;
  int64_t draft_vocab = 0;
  SamplingParams sampling;
  bool print_ids = false, ignore_eos = false, hash = false, check_weights = false;
  bool quiet = false;    // no notices or timings on stderr
  bool verbose = false;  // also the seed, so a sampled run can be reproduced
};

// The prompt's ids: --ids as given, --prompt through the model folder's tokenizer, --chat through its chat template
// (one user message, then the assistant's turn).
std::vector<int32_t> prompt_ids(const GenerateArgs& a, const std::optional<tokenizer::Tokenizer>& tok, int64_t vocab) {
  PLUMB_CHECK(a.ids.empty() + a.prompt.empty() + a.chat.empty() == 2,
              "generate needs exactly one of --ids, --prompt "
              "and --chat");
  if (!a.ids.empty()) return parse_token_ids(a.ids, "--ids", vocab);
  PLUMB_CHECK(!a.model.is_synthetic(), "--synthetic {} has random weights and no tokenizer: give the prompt as --ids",
              a.model.synthetic);
  std::string text = a.prompt;
  if (!a.chat.empty()) {
    const nlohmann::ordered_json kwargs = {{"messages", {{{"role", "user"}, {"content", a.chat}}}},
                                           {"add_generation_prompt", true}};
    text = tokenizer::render_chat(tokenizer::ChatTemplate::from_dir(a.model.dir), kwargs);
  }
  std::vector<int32_t> ids = tok->encode(text);
  PLUMB_CHECK(!ids.empty(), "the prompt encodes to no tokens");
  check_tokenizer_ids(ids, a.model.dir, vocab);
  return ids;
}

void run_generate(const GenerateArgs& a) {
  const auto backend = make_backend(a.device);
  // Everything the command line can get wrong is checked before the model loads.
  const ModelConfig config = a.model.config();
  const int64_t vocab = config.vocab_size;
  std::optional<tokenizer::Tokenizer> tok;
  if (a.ids.empty() && !a.model.is_synthetic()) tok = tokenizer::Tokenizer::from_dir(a.model.dir);
  const std::vector<int32_t> prompt = prompt_ids(a, tok, vocab);
  GenerateOptions options;
  options.max_tokens = a.max_tokens;
  options.sampling = a.sampling;
  options.speculative_tokens = a.speculative_tokens;
  options.draft_vocab = a.draft_vocab;
  // A synthetic model has no folder, so no eos ids: it stops at --stop-ids or --max-tokens.
  if (!a.stop_ids.empty())
    options.stop_ids = parse_token_ids(a.stop_ids, "--stop-ids", vocab);
  else if (!a.model.is_synthetic())
    options.stop_ids = default_stop_ids(a.model.dir, config);
  if (a.ignore_eos) options.stop_ids.clear();
  check_generation(config, static_cast<int64_t>(prompt.size()), options);
  LoadOptions load;
  load.check_weights = a.check_weights;
  load.mtp = a.speculative_tokens > 0;
  const Qwen3NextModel model = a.model.open(*backend, load, a.quiet);
  if (a.verbose)
    std::fprintf(stderr, "plumb: seed %llu (--seed %llu reproduces this run)\n",
                 static_cast<unsigned long long>(a.sampling.seed), static_cast<unsigned long long>(a.sampling.seed));
  // Text is printed as it streams, whole UTF-8 characters at a time; without a tokenizer, ids are.
  std::optional<tokenizer::StreamDecoder> text;
  if (tok && !a.print_ids) text.emplace(*tok, tokenizer::SpecialTokens::kSkip);
  GenerationTimer timer;
  const GenerateResult result = generate(model, prompt, options, [&](int32_t id) {
    timer.token();
    if (a.print_ids) return;
    if (text)
      std::fputs(text->push(id).c_str(), stdout);
    else
      std::printf("%d ", id);
    std::fflush(stdout);
  });
  timer.finished();
  if (text) std::fputs(text->flush().c_str(), stdout);
  if (a.print_ids) {
    for (size_t i = 0; i < result.tokens.size(); ++i) std::printf(i ? " %d" : "%d", result.tokens[i]);
  }
  std::printf("\n");
  if (a.hash) {
    const std::vector<int32_t>& t = result.tokens;
    print_hash("tokens", fnv1a64(t.data(), t.size() * sizeof(int32_t)));
    print_state_hashes(model, result.state);
  }
  std::fflush(stdout);
  if (!a.quiet)
    std::fputs((timer.report(static_cast<int64_t>(prompt.size()), static_cast<int64_t>(result.tokens.size()),
                             result.finish == FinishReason::kStop) +
                GenerationTimer::speculation_report(result.speculation))
                   .c_str(),
               stderr);
}

}  // namespace

void register_model_commands(CLI::App& app) {
  auto logits_args = std::make_shared<LogitsArgs>();
  CLI::App* logits = app.add_subcommand("logits", "Write the float32 logits [T, vocab] of one prefill as .npy");
  logits->add_option("--model", logits_args->model, "model folder")->required();
  logits->add_option("--ids", logits_args->ids, "token ids, comma-separated (or @FILE)")->required();
  logits->add_option("--out", logits_args->out, "output .npy file");
  logits->add_option("--device", logits_args->device, kDeviceHelp);
  logits->add_flag("--hash", logits_args->hash, "print FNV-1a hashes of the logits and every layer's final state");
  logits->add_option("--batch", logits_args->batch,
                     "run the prompt among this many sequences (the others are companions of other lengths)");
  logits->add_option("--prefill-chunk", logits_args->prefill_chunk, "tokens per forward call (0: all at once)");
  logits->add_option("--record-routing", logits_args->record_routing, "write every MoE layer's expert choices (JSON)");
  logits->add_option("--replay-routing", logits_args->replay_routing,
                     "route with the expert choices --record-routing wrote (to compare backends' arithmetic)");
  logits->callback([logits_args] {
    PLUMB_CHECK(!logits_args->out.empty() || logits_args->hash, "logits needs --out FILE.npy or --hash");
    run_logits(*logits_args);
  });

  auto gen_args = std::make_shared<GenerateArgs>();
  CLI::App* gen = app.add_subcommand("generate", "Generate tokens after a prompt");
  gen_args->model.add_options(*gen, kModelHelp);
  gen->add_option("--ids", gen_args->ids, "prompt token ids, comma-separated (or @FILE)");
  gen->add_option("--prompt", gen_args->prompt, "prompt text, encoded with the model folder's tokenizer.json");
  gen->add_option("--chat", gen_args->chat, "a user message, formatted with the model folder's chat template");
  gen->add_option("--max-tokens", gen_args->max_tokens, "most tokens to generate");
  gen->add_option("--speculative-tokens", gen_args->speculative_tokens, kSpeculativeTokensHelp);
  gen->add_option("--draft-vocab", gen_args->draft_vocab, kDraftVocabHelp);
  CLI::Option* seed = add_sampling_options(*gen, gen_args->sampling);
  gen->add_option("--stop-ids", gen_args->stop_ids,
                  "token ids that end generation, comma-separated (default: the model's eos ids)");
  gen->add_flag("--check-weights", gen_args->check_weights, kCheckWeightsHelp);
  gen->add_flag("--ignore-eos", gen_args->ignore_eos, "generate --max-tokens tokens whatever is drawn");
  gen->add_option("--device", gen_args->device, kDeviceHelp);
  gen->add_flag("--print-ids", gen_args->print_ids, "print the generated ids on one line");
  gen->add_flag("--hash", gen_args->hash, "print FNV-1a hashes of the generated ids and every layer's final state");
  gen->add_flag("--quiet,-q", gen_args->quiet, "print no notices or timings on stderr");
  gen->add_flag("--verbose,-v", gen_args->verbose, "also print the seed on stderr");
  gen->callback([gen_args, seed] {
    gen_args->model.resolve(gen_args->check_weights, gen_args->quiet);
    if (seed->count() == 0) gen_args->sampling.seed = fresh_seed();
    run_generate(*gen_args);
  });

  auto inspect_args = std::make_shared<InspectArgs>();
  CLI::App* inspect =
      app.add_subcommand("inspect", "Summarize a model folder: architecture, parameters, bytes per token");
  inspect->add_option("--model", inspect_args->model, "model folder")->required();
  inspect
      ->add_option<std::optional<int64_t>, int64_t>("--context", inspect_args->context,
                                                    "context length for the KV bytes of one decode step")
      ->default_str("the model's max_position_embeddings");
  inspect->add_option("--sequences", inspect_args->sequences,
                      "sequences of --context tokens each that the GPU memory estimate holds");
  inspect->callback([inspect_args] { print_model_report(*inspect_args); });
}

}  // namespace plumb::cli
