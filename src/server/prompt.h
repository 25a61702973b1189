// The text side of the served model: its tokenizer, chat template and end-of-sequence tokens, read from the model
// folder (tokenizer.json, tokenizer_config.json or chat_template.jinja, generation_config.json, config.json).
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

  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  // The prompt text of a conversation, with the generation prompt appended. `extra` holds further template
  // variables (enable_thinking, ...). Throws plumb::Error when there is no template or it fails.
  std::string render_chat(const Json& messages, const Json& tools, const Json& extra) const;
  // Ids that end generation unless the request sets ignore_eos: the eos tokens of all the folder's files.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

 private:
  ModelText(tokenizer::Tokenizer tokenizer, std::optional<tokenizer::ChatTemplate> chat_template,
            std::vector<int32_t> eos_ids);
  tokenizer::Tokenizer tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
  std::vector<int32_t> eos_ids_;
};

// Whether a rendered prompt leaves the model inside a reasoning block (it ends with an open "<think>").
bool prompt_opens_reasoning(const std::string& prompt);

}  // namespace plumb::server
