// Chat templates: turns a conversation (messages, tools, add_generation_prompt, enable_thinking, ...) into the prompt
// text that transformers' apply_chat_template(..., tokenize=False) produces, by interpreting the model folder's Jinja
// chat template (a subset of Jinja; see docs/tokenizer.md).
//
//   const auto tmpl = plumb::tokenizer::ChatTemplate::from_dir("models/qwen3");
//   nlohmann::ordered_json kwargs = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
//                                    {"add_generation_prompt", true}};
//   std::string prompt = plumb::tokenizer::render_chat(tmpl, kwargs);
//
// kwargs is an ordered_json because templates serialise tools with tojson, whose key order must be the caller's.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace plumb::tokenizer {

namespace jinja {
struct Node;
}

class ChatTemplate {
 public:
  // Reads <dir>/chat_template.jinja if present (transformers prefers it), else "chat_template" from
  // <dir>/tokenizer_config.json (a string, or a list of {name, template} from which "default" is taken). Special
  // tokens (bos_token, eos_token, pad_token, unk_token) come from tokenizer_config.json when it exists.
  // Throws plumb::Error naming the file and, for template syntax, the template line.
  static ChatTemplate from_dir(const std::string& dir);
  // Parses template source; `special_tokens` is an object such as {"eos_token": "<|im_end|>"}.
  static ChatTemplate from_string(const std::string& source,
                                  const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  const std::string& source() const { return source_; }
  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }

 private:
  ChatTemplate() = default;
  friend std::string render_chat(const ChatTemplate&, const nlohmann::ordered_json&);

  std::string source_;
  std::shared_ptr<const std::vector<jinja::Node>> body_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  std::optional<std::string> bos_token_, eos_token_;
};

// Renders the template. `kwargs` holds "messages" (required) and any other apply_chat_template keyword arguments
// (tools, documents, add_generation_prompt, enable_thinking, ...); like transformers, tools, documents and
// add_generation_prompt default to None/None/False and the special tokens are visible as variables.
// continue_final_message is not supported (plumb::Error if true).
std::string render_chat(const ChatTemplate& chat_template, const nlohmann::ordered_json& kwargs);

}  // namespace plumb::tokenizer
