#include "engine/generate.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/json_depth.h"
#include "loader/load_model.h"

namespace plumb {

Qwen3NextModel open_model(const std::string& model_dir, Backend& backend, bool check_weights) {
  return open_model(model_dir, backend, LoadOptions{check_weights, {}});
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

// The decode loop on `state`, which has processed the first state.position ids of the prompt.
GenerateResult run_generation(const Qwen3NextModel& model, SequenceState state, const std::vector<int32_t>& prompt,
                              const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  const Sampler sampler(options.sampling);
  const int64_t vocab = model.config().vocab_size;
  GenerateResult result;
  result.state = std::move(state);
  std::vector<int32_t> history = prompt;
  std::vector<int32_t> next_input(prompt.begin() + result.state.position, prompt.end());
  for (int64_t step = 0; step < options.max_tokens; ++step) {
    const Tensor logits =
        model.backend().download(model.forward(result.state, next_input, LogitsRows::kLast));  // [1, V]
    // The prompt's length, as the engine gives it: presence and frequency penalties count generated tokens only.
    const int32_t id =
        sampler.sample(logits.f32(), vocab, history, static_cast<uint64_t>(step), static_cast<int64_t>(prompt.size()));
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), id) != options.stop_ids.end()) {
      result.finish = FinishReason::kStop;
      result.stop_token = id;
      break;
    }
    result.tokens.push_back(id);
    history.push_back(id);
    if (on_token) on_token(id);
    next_input = {id};
  }
  return result;
}

}  // namespace

void check_generation(const ModelConfig& config, int64_t prompt_tokens, const GenerateOptions& options) {
  PLUMB_CHECK(prompt_tokens > 0, "the prompt is empty: generation needs at least one token");
  PLUMB_CHECK(options.max_tokens >= 0, "max tokens must be >= 0, got {}", options.max_tokens);
  const Sampler validated(options.sampling);  // its constructor checks the parameters
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
  return run_generation(model, model.new_sequence(static_cast<int64_t>(prompt.size())), prompt, options, on_token);
}

GenerateResult continue_generation(const Qwen3NextModel& model, SequenceState state, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  check_generation(model.config(), static_cast<int64_t>(prompt.size()), options);
  PLUMB_CHECK(state.position >= 0 && state.position < static_cast<int64_t>(prompt.size()),
              "a sequence that has processed {} tokens cannot continue with a prompt of {}: it needs a new token",
              state.position, prompt.size());
  return run_generation(model, std::move(state), prompt, options, on_token);
}

}  // namespace plumb
