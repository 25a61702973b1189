#include "server/prompt.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "core/json_depth.h"

namespace plumb::server {

namespace {

// The file's JSON object, or an empty object when the file is absent or not an object. A file nested too deeply, or
// one that is not a regular file, is an error.
Json read_object(const std::filesystem::path& path) {
  const std::optional<std::string> text = read_regular_file_if_exists(path.string());
  if (text) check_json_depth(*text, path.string());
  Json j = text ? Json::parse(*text, nullptr, /*allow_exceptions=*/false) : Json();
  return j.is_object() ? j : Json::object();
}

void add_id(std::vector<int32_t>& ids, const Json& v) {
  if (v.is_number_integer()) {
    const auto id = v.get<int64_t>();
    if (id >= 0 && id <= INT32_MAX && std::find(ids.begin(), ids.end(), id) == ids.end())
      ids.push_back(static_cast<int32_t>(id));
  } else if (v.is_array()) {
    for (const Json& x : v) add_id(ids, x);
  }
}

}  // namespace

ModelText::ModelText(std::optional<tokenizer::Tokenizer> tokenizer,
                     std::optional<tokenizer::ChatTemplate> chat_template, std::vector<int32_t> eos_ids,
                     std::string no_tokenizer_reason)
    : tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)),
      eos_ids_(std::move(eos_ids)),
      no_tokenizer_reason_(std::move(no_tokenizer_reason)) {}

ModelText ModelText::token_ids_only(std::string why) {
  return ModelText(std::nullopt, std::nullopt, {}, std::move(why));
}

const tokenizer::Tokenizer& ModelText::tokenizer() const {
  PLUMB_CHECK(tokenizer_,
              "this model has no tokenizer ({}): send the prompt as a list of token ids to /v1/completions, e.g. "
              "{{\"prompt\": [1, 2, 3]}}",
              no_tokenizer_reason_);
  return *tokenizer_;
}

std::string ModelText::token_bytes(int32_t id) const {
  return tokenizer_ ? std::string(tokenizer_->token_bytes(id)) : fmt::format(" {}", id);
}

ModelText ModelText::from_dir(const std::string& dir) {
  const std::filesystem::path folder(dir);
  tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_dir(dir);
  std::optional<tokenizer::ChatTemplate> chat_template;
  const Json tokenizer_config = read_object(folder / "tokenizer_config.json");
  if (std::filesystem::exists(folder / "chat_template.jinja") || tokenizer_config.contains("chat_template"))
    chat_template = tokenizer::ChatTemplate::from_dir(dir);

  std::vector<int32_t> eos;
  add_id(eos, read_object(folder / "generation_config.json").value("eos_token_id", Json()));
  add_id(eos, read_object(folder / "config.json").value("eos_token_id", Json()));
  Json eos_token = tokenizer_config.value("eos_token", Json());
  if (eos_token.is_object()) eos_token = eos_token.value("content", Json());  // an AddedToken dict
  if (eos_token.is_string()) {
    if (const std::optional<int32_t> id = tokenizer.token_id(eos_token.get<std::string>())) add_id(eos, *id);
  }
  return ModelText(std::move(tokenizer), std::move(chat_template), std::move(eos), "");
}

std::string ModelText::render_chat(const Json& messages, const Json& tools, const Json& extra) const {
  tokenizer();  // a model without one says so, rather than that it lacks a template
  PLUMB_CHECK(chat_template_, "this model folder has no chat template; use /v1/completions");
  Json kwargs = extra;
  kwargs["messages"] = messages;
  kwargs["add_generation_prompt"] = true;
  if (!tools.is_null()) kwargs["tools"] = tools;
  return tokenizer::render_chat(*chat_template_, kwargs);
}

bool prompt_opens_reasoning(const std::string& prompt) {
  const size_t open = prompt.rfind("<think>");
  return open != std::string::npos && prompt.find("</think>", open) == std::string::npos;
}

}  // namespace plumb::server
