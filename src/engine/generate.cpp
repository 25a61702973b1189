#include "engine/generate.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/json_depth.h"
#include "engine/speculative.h"
#include "loader/load_model.h"

namespace plumb {

Qwen3NextModel open_model(const std::string& model_dir, Backend& backend, bool check_weights) {
  LoadOptions options;
  options.check_weights = check_weights;
  return open_model(model_dir, backend, options);
}

Qwen3NextModel open_model(const std::string& model_dir, Backend& backend, const LoadOptions& options) {
  LoadedModel loaded = load_model(model_dir, backend, options);
  return Qwen3NextModel(std::move(loaded.config), std::move(loaded.weights), backend);
}

std::vector<int32_t> default_stop_ids(const std::string& model_dir, const ModelConfig& config) {
  std::vector<int64_t> ids = config.eos_token_ids;
  const std::string path = model_dir + "/generation_config.json";
  if (std::filesystem::exists(path)) {
    const std::string text = read_regular_file(path);
    check_json_depth(text, path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number past its type's range (406)
      PLUMB_FAIL("{}: not valid JSON ({})", path, e.what());
    }
    const nlohmann::json eos = j.is_object() && j.contains("eos_token_id") ? j["eos_token_id"] : nlohmann::json();
    for (const nlohmann::json& e : eos.is_array() ? eos : nlohmann::json::array({eos})) {
      if (e.is_null()) continue;
      PLUMB_CHECK(e.is_number_integer(), "{}: eos_token_id holds a non-integer {}", path, e.dump());
      ids.push_back(e.get<int64_t>());
    }
  }
  std::vector<int32_t> out;
  for (int64_t id : ids) {
    PLUMB_CHECK(id >= 0 && id < config.vocab_size, "{}: eos token id {} is outside the vocabulary ({})", model_dir, id,
                config.vocab_size);
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

namespace {

// The draws of one generation, in order: each samples a token from one position's logits with the next step number,
// and ends the generation at a stop token or the token limit. Both decode loops below draw through it, so a
// speculative run draws exactly what a plain one does.
class TokenDraws {
 public:
  TokenDraws(const Qwen3NextModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
             const std::function<void(int32_t)>& on_token, GenerateResult& result)
      : sampler_(options.sampling),
        vocab_(model.config().vocab_size),
        prompt_length_(static_cast<int64_t>(prompt.size())),
        options_(options),
        on_token_(on_token),
        result_(result),
        history_(prompt) {}

  // The token drawn from `logits` [V], or nullopt when it is a stop token, which ends the generation.
  std::optional<int32_t> draw(const float* logits) {
    const int32_t id = sampler_.sample(logits, vocab_, history_, static_cast<uint64_t>(step_++), prompt_length_);
    if (std::find(options_.stop_ids.begin(), options_.stop_ids.end(), id) != options_.stop_ids.end()) {
      result_.finish = FinishReason::kStop;
      result_.stop_token = id;
      return std::nullopt;
    }
    result_.tokens.push_back(id);
    history_.push_back(id);
    if (on_token_) on_token_(id);
    return id;
  }
  // Tokens the limit still allows.
  int64_t left() const { return options_.max_tokens - static_cast<int64_t>(result_.tokens.size()); }

 private:
  const Sampler sampler_;
  const int64_t vocab_, prompt_length_;
  const GenerateOptions& options_;
  const std::function<void(int32_t)>& on_token_;
  GenerateResult& result_;
  std::vector<int32_t> history_;
  int64_t step_ = 0;
};

// The decode loop on `state`, which has processed the first state.position ids of the prompt.
GenerateResult run_generation(const Qwen3NextModel& model, SequenceState state, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  GenerateResult result;
  result.state = std::move(state);
  TokenDraws draws(model, prompt, options, on_token, result);
  std::vector<int32_t> next_input(prompt.begin() + result.state.position, prompt.end());
  while (draws.left() > 0) {
    const Tensor logits =
        model.backend().download(model.forward(result.state, next_input, LogitsRows::kLast));  // [1, V]
    const std::optional<int32_t> id = draws.draw(logits.f32());
    if (!id) break;
    next_input = {*id};
  }
  return result;
}

// The speculative decode loop (engine/speculative.h) on `state`, which has processed the first state.position ids of
// the prompt.
GenerateResult run_speculative(const Qwen3NextModel& model, SequenceState state, const std::vector<int32_t>& prompt,
                               const GenerateOptions& options, Drafter& drafter,
                               const std::function<void(int32_t)>& on_token) {
  GenerateResult result;
  result.state = std::move(state);
  if (options.max_tokens == 0) return result;
  SequenceState& s = result.state;
  Backend& be = model.backend();
  const int64_t vocab = model.config().vocab_size;
  TokenDraws draws(model, prompt, options, on_token, result);
  int64_t from = s.position;
  std::vector<int32_t> run(prompt.begin() + from, prompt.end());  // the tokens at positions [from, s.position)
  Tensor hidden;                                                  // [run, H] their final hidden states
  StateTrail trail;  // a verification's states after each of its tokens but the last
  Tensor logits = be.download(model.forward(s, run, LogitsRows::kLast, GdnAlgorithm::kChunked, &hidden));  // [1, V]
  std::optional<int32_t> drawn = draws.draw(logits.f32());
  for (;;) {
    // The drafter sees every position run, each with the token after it, the last one drawn included, so its own
    // cache keeps up; after the last step it is asked for nothing.
    std::vector<int32_t> next_ids(run.begin() + 1, run.end());
    next_ids.push_back(drawn ? *drawn : *result.stop_token);
    const bool over = !drawn || draws.left() == 0;
    // k drafts make at most k + 1 tokens, within the limit.
    const int64_t count = over ? 0 : std::min(options.speculative_tokens, draws.left() - 1);
    const std::vector<std::vector<int32_t>> proposed =
        drafter.propose({DraftRequest{&s, from, next_ids, hidden, count}});
    if (over) break;
    PLUMB_CHECK(proposed.size() == 1 && static_cast<int64_t>(proposed[0].size()) <= count,
                "a drafter proposed {} tokens where {} were asked", proposed.empty() ? 0 : proposed[0].size(), count);
    const std::vector<int32_t>& drafts = proposed[0];
    std::vector<int32_t> verify = {*drawn};
    verify.insert(verify.end(), drafts.begin(), drafts.end());
    from = s.position;
    // The call leaves its states after each of its first k tokens in `trail`, for when not every token is kept.
    logits = be.download(model.forward({SequenceInput{&s, verify, &trail}}, LogitsRows::kAll, GdnAlgorithm::kRecurrent,
                                       &hidden));  // [k+1, V]
    // Row i's logits follow verify[i]; its draw stands for drafts[i], and the next row counts only if they agree.
    size_t kept = 0;
    while (kept < verify.size()) {
      drawn = draws.draw(logits.f32() + static_cast<int64_t>(kept) * vocab);
      const bool agrees = kept < drafts.size() && (drawn ? *drawn : *result.stop_token) == drafts[kept];
      ++kept;
      result.speculation.accepted += agrees ? 1 : 0;
      if (!drawn || !agrees || draws.left() == 0) break;
    }
    result.speculation.steps += drafts.empty() ? 0 : 1;
    result.speculation.drafted += static_cast<int64_t>(drafts.size());
    run.assign(verify.begin(), verify.begin() + static_cast<int64_t>(kept));
    // Back to the state after the kept tokens: a swap with the trail's state after the last of them.
    model.rewind(s, trail, from + static_cast<int64_t>(kept));
    hidden = hidden.rows(0, static_cast<int64_t>(kept));
  }
  return result;
}

void check_continuation(const SequenceState& state, const std::vector<int32_t>& prompt) {
  PLUMB_CHECK(state.position >= 0 && state.position < static_cast<int64_t>(prompt.size()),
              "a sequence that has processed {} tokens cannot continue with a prompt of {}: it needs a new token",
              state.position, prompt.size());
}

// Plain or speculative decoding, as options ask, of a state that check_continuation accepts.
GenerateResult decode(const Qwen3NextModel& model, SequenceState state, const std::vector<int32_t>& prompt,
                      const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  if (options.speculative_tokens == 0) return run_generation(model, std::move(state), prompt, options, on_token);
  MtpDrafter drafter(model, options.draft_vocab);
  return run_speculative(model, std::move(state), prompt, options, drafter, on_token);
}

}  // namespace

void check_generation(const ModelConfig& config, int64_t prompt_tokens, const GenerateOptions& options) {
  PLUMB_CHECK(prompt_tokens > 0, "the prompt is empty: generation needs at least one token");
  PLUMB_CHECK(options.max_tokens >= 0, "max tokens must be >= 0, got {}", options.max_tokens);
  const Sampler validated(options.sampling);  // its constructor checks the parameters
  PLUMB_CHECK(options.speculative_tokens >= 0 && options.speculative_tokens <= kMaxSpeculativeTokens,
              "speculative tokens must be in 0..{}, got {}", kMaxSpeculativeTokens, options.speculative_tokens);
  check_draft_vocab(config, options.draft_vocab, options.speculative_tokens);
  const int64_t context = config.max_position_embeddings;
  PLUMB_CHECK(prompt_tokens < context && options.max_tokens <= context - prompt_tokens,
              "max tokens {} after a prompt of {} tokens exceeds the model's context of {} tokens (at most {} here)",
              options.max_tokens, prompt_tokens, context, std::max<int64_t>(0, context - prompt_tokens));
}

GenerateResult generate(const Qwen3NextModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token) {
  // Checked before anything is allocated; pages then come as the sequence grows, so memory follows the tokens made,
  // not the limit asked for.
  check_generation(model.config(), static_cast<int64_t>(prompt.size()), options);
  return decode(model, model.new_sequence(static_cast<int64_t>(prompt.size())), prompt, options, on_token);
}

GenerateResult continue_generation(const Qwen3NextModel& model, SequenceState state, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  check_generation(model.config(), static_cast<int64_t>(prompt.size()), options);
  check_continuation(state, prompt);
  return decode(model, std::move(state), prompt, options, on_token);
}

GenerateResult generate_with_drafter(const Qwen3NextModel& model, std::optional<SequenceState> state,
                                     const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                     Drafter& drafter, const std::function<void(int32_t)>& on_token) {
  check_generation(model.config(), static_cast<int64_t>(prompt.size()), options);
  if (!state) state = model.new_sequence(static_cast<int64_t>(prompt.size()));
  check_continuation(*state, prompt);
  return run_speculative(model, std::move(*state), prompt, options, drafter, on_token);
}

}  // namespace plumb
