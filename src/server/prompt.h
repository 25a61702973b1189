// The text side of the served model: its tokenizer, chat template and end-of-sequence tokens, read from the model
// folder (tokenizer.json, tokenizer_config.json or chat_template.jinja, generation_config.json, config.json). A model
// without a folder (plumb serve --synthetic) has none of them and serves token ids only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/openai_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace plumb::server {

class ModelText {
 public:
  // Throws plumb::Error when the folder has no usable tokenizer.json. A folder without a chat template serves
  // /v1/completions only.
  static ModelText from_dir(const std::string& dir);
  // No tokenizer, template or eos tokens: prompts are token ids, and a token's text is its id in decimal after a
  // space (" 17 4 99"). `why` says why there is no tokenizer, for the errors of requests that need one.
  static ModelText token_ids_only(std::string why);

  bool has_tokenizer() const { return tokenizer_.has_value(); }
  // Throws plumb::Error without one.
  const tokenizer::Tokenizer& tokenizer() const;
  // The ids of a text prompt. Throws plumb::Error without a tokenizer.
  std::vector<int32_t> encode(const std::string& text) const { return tokenizer().encode(text); }
  // The bytes token `id` stands for (a multi-byte character may be split across tokens), or " ID" without a tokenizer.
  std::string token_bytes(int32_t id) const;
  // The prompt text of a conversation, with the generation prompt appended. `extra` holds further template
  // variables (enable_thinking, ...). Throws plumb::Error when there is no tokenizer or template, or it fails.
  std::string render_chat(const Json& messages, const Json& tools, const Json& extra) const;
  // Ids that end generation unless the request sets ignore_eos: the eos tokens of all the folder's files.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

 private:
  ModelText(std::optional<tokenizer::Tokenizer> tokenizer, std::optional<tokenizer::ChatTemplate> chat_template,
            std::vector<int32_t> eos_ids, std::string no_tokenizer_reason);
  std::optional<tokenizer::Tokenizer> tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
  std::vector<int32_t> eos_ids_;
  std::string no_tokenizer_reason_;
};

// Whether a rendered prompt leaves the model inside a reasoning block (it ends with an open "<think>").
bool prompt_opens_reasoning(const std::string& prompt);

}  // namespace plumb::server
