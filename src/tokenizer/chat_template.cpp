// Loading and rendering chat templates (see chat_template.h).
#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "core/files.h"
#include "core/json_depth.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace plumb::tokenizer {
namespace {

constexpr const char* kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "pad_token"};

// A special token in tokenizer_config.json is a string, null, or an AddedToken object {"content": ...}.
std::optional<std::string> special_token(const nlohmann::ordered_json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  PLUMB_CHECK(it->is_object() && it->contains("content") && (*it)["content"].is_string(),
              "tokenizer_config.json: {} must be a string, null or an object with \"content\"", key);
  return (*it)["content"].get<std::string>();
}

std::string template_from_config(const nlohmann::ordered_json& config) {
  auto it = config.find("chat_template");
  PLUMB_CHECK(it != config.end() && !it->is_null(),
              "tokenizer_config.json: chat_template is missing (and there is no chat_template.jinja)");
  if (it->is_string()) return it->get<std::string>();
  PLUMB_CHECK(it->is_array(), "tokenizer_config.json: chat_template must be a string or a list of templates");
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& entry = (*it)[i];
    PLUMB_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                    entry.contains("template") && entry["template"].is_string(),
                "tokenizer_config.json: chat_template[{}] must be {{\"name\": ..., \"template\": ...}}", i);
    if (entry["name"] == "default") return entry["template"].get<std::string>();
  }
  PLUMB_FAIL("tokenizer_config.json: chat_template has no template named \"default\"");
}

}  // namespace

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::from_dir(const std::string& dir) {
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (const auto text = read_regular_file_if_exists(dir + "/tokenizer_config.json")) {
    check_json_depth(*text, dir + "/tokenizer_config.json");
    config = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
    PLUMB_CHECK(!config.is_discarded() && config.is_object(), "{}/tokenizer_config.json: not a JSON object", dir);
  }
  nlohmann::ordered_json special = nlohmann::ordered_json::object();
  for (const char* key : kSpecialTokenNames) {
    if (auto token = special_token(config, key)) special[key] = *token;
  }
  std::optional<std::string> source = read_regular_file_if_exists(dir + "/chat_template.jinja");
  const std::string origin = source ? dir + "/chat_template.jinja" : dir + "/tokenizer_config.json";
  try {
    if (!source) {
      PLUMB_CHECK(!config.empty(), "no chat_template.jinja or tokenizer_config.json");
      source = template_from_config(config);
    }
    return from_string(*source, special);
  } catch (const Error& e) {
    throw Error(fmt::format("{} ({})", e.what(), origin));
  }
}

ChatTemplate ChatTemplate::from_string(const std::string& source, const nlohmann::ordered_json& special_tokens) {
  PLUMB_CHECK(special_tokens.is_object(), "special tokens must be a JSON object");
  ChatTemplate t;
  t.source_ = source;
  t.body_ = std::make_shared<const jinja::Body>(jinja::parse_template(source));
  t.special_tokens_ = special_tokens;
  if (special_tokens.contains("bos_token")) t.bos_token_ = special_tokens["bos_token"].get<std::string>();
  if (special_tokens.contains("eos_token")) t.eos_token_ = special_tokens["eos_token"].get<std::string>();
  return t;
}

std::string render_chat(const ChatTemplate& chat_template, const nlohmann::ordered_json& kwargs) {
  PLUMB_CHECK(kwargs.is_object(), "chat arguments must be a JSON object with \"messages\"");
  PLUMB_CHECK(kwargs.contains("messages") && kwargs["messages"].is_array(),
              "chat arguments: \"messages\" must be a list of messages");
  // Any value but false or null asks for it (a non-boolean is refused the same way, not thrown as a type error).
  const nlohmann::ordered_json continue_final = kwargs.value("continue_final_message", nlohmann::ordered_json());
  PLUMB_CHECK(continue_final.is_null() || continue_final == false,
              "chat arguments: continue_final_message is not supported");
  PLUMB_CHECK(!kwargs.contains("chat_template"), "chat arguments: a chat_template override is not supported");
  // Variables in transformers' order of precedence: special tokens, then the defaults, then the caller's arguments.
  jinja::Dict variables;
  auto set = [&](const std::string& key, jinja::Value value) {
    for (auto& [k, v] : variables) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
    variables.emplace_back(key, std::move(value));
  };
  for (const auto& [k, v] : chat_template.special_tokens_.items()) set(k, jinja::Value::from_json(v));
  set("tools", jinja::Value::none());
  set("documents", jinja::Value::none());
  set("add_generation_prompt", jinja::Value::boolean(false));
  for (const auto& [k, v] : kwargs.items()) {
    if (k == "continue_final_message") continue;
    set(k, jinja::Value::from_json(v));
  }
  return jinja::render(*chat_template.body_, variables);
}

}  // namespace plumb::tokenizer
