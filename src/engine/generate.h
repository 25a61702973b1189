// Generation for one sequence: a prefill of the prompt, then one decode step per new token, until a stop token or
// the token limit.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/speculative.h"
#include "loader/load_model.h"
#include "model/qwen3_next.h"

namespace plumb {

struct GenerateOptions {
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_ids;  // generation ends when one is drawn; it is not part of the output
  SamplingParams sampling;
  // Draft tokens per step for speculative decoding (engine/speculative.h), 0 to 8; 0 decodes one token a step. The
  // tokens are the same either way.
  int64_t speculative_tokens = 0;
  // The drafts' vocabulary: ids [0, draft_vocab) (MtpDrafter), 0 for all of the model's. Only how many drafts are kept
  // depends on it, never a token.
  int64_t draft_vocab = 0;
};

enum class FinishReason { kLength, kStop };

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, without the stop token
  FinishReason finish = FinishReason::kLength;
  std::optional<int32_t> stop_token;  // the stop token drawn, when finish is kStop
  SequenceState state;                // the sequence's state after its last forward step
  SpeculationStats speculation;       // all zero without speculative decoding
};

// Throws unless `options` are valid (its sampling parameters included) and a prompt of `prompt_tokens` tokens plus
// options.max_tokens fit `config`'s context. generate() checks this first; a caller may check it before loading the
// model, so that bad input fails before the expensive part.
void check_generation(const ModelConfig& config, int64_t prompt_tokens, const GenerateOptions& options);

// Calls on_token(id) for each generated token as it is produced (not for the stop token).
GenerateResult generate(const Qwen3NextModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token = {});
// generate() on a sequence that has already processed the first state.position ids of `prompt` (a conversation's
// earlier turns): only the rest runs. At least one id of `prompt` must be new.
GenerateResult continue_generation(const Qwen3NextModel& model, SequenceState state, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& options, const std::function<void(int32_t)>& on_token = {});

// generate() or continue_generation() (state given) with options.speculative_tokens drafted by `drafter` each step;
// generate() itself drafts with the model's MTP head (MtpDrafter). The tokens are generate()'s without speculation.
GenerateResult generate_with_drafter(const Qwen3NextModel& model, std::optional<SequenceState> state,
                                     const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                     Drafter& drafter, const std::function<void(int32_t)>& on_token = {});

// Opens DIR as a model on `backend`; with check_weights, every weight is scanned for NaN and infinity first.
Qwen3NextModel open_model(const std::string& model_dir, Backend& backend, bool check_weights = false);
Qwen3NextModel open_model(const std::string& model_dir, Backend& backend, const LoadOptions& options);

// The ids that end generation by default: config.json's eos_token_id and those of generation_config.json, if any.
std::vector<int32_t> default_stop_ids(const std::string& model_dir, const ModelConfig& config);

}  // namespace plumb
