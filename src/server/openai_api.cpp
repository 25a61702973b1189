#include "server/openai_api.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace plumb::server {

namespace {

constexpr int32_t kMaxChatTopLogprobs = 20;  // OpenAI's limits
constexpr int32_t kMaxCompletionLogprobs = 5;
constexpr size_t kMaxStops = 16;

const Json* field(const Json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const Json& body, const char* name, double lo, double hi) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  PLUMB_CHECK(v->is_number(), "'{}' must be a number, got {}", name, v->dump());
  const double x = v->get<double>();
  PLUMB_CHECK(x >= lo && x <= hi, "'{}' must be in [{}, {}], got {}", name, lo, hi, x);
  return x;
}

std::optional<int64_t> integer(const Json& body, const char* name, int64_t lo, int64_t hi) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  PLUMB_CHECK(v->is_number_integer(), "'{}' must be an integer, got {}", name, v->dump());
  const bool beyond_int64 = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  const int64_t x = beyond_int64 ? INT64_MAX : v->get<int64_t>();
  PLUMB_CHECK(!beyond_int64 && x >= lo && x <= hi, "'{}' must be in [{}, {}], got {}", name, lo, hi, v->dump());
  return x;
}

// Whether `j` is an object whose "type" is the string `type` (a "type" of another kind is just not it).
bool has_type(const Json& j, const char* type) {
  if (!j.is_object()) return false;
  const Json* t = field(j, "type");
  return t != nullptr && t->is_string() && t->get_ref<const std::string&>() == type;
}

bool boolean(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return false;
  PLUMB_CHECK(v->is_boolean(), "'{}' must be a boolean, got {}", name, v->dump());
  return v->get<bool>();
}

int32_t token_id(const Json& v, const char* name) {
  PLUMB_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
              "'{}' must hold token ids (integers >= 0), got {}", name, v.dump());
  return static_cast<int32_t>(v.get<int64_t>());
}

void parse_sampling(const Json& body, ApiRequest& r) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  SamplingParams& s = r.sampling;
  s.temperature = static_cast<float>(number(body, "temperature", 0.0, 2.0).value_or(1.0));
  s.top_p = static_cast<float>(number(body, "top_p", 0.0, 1.0).value_or(1.0));
  PLUMB_CHECK(s.top_p > 0.0f, "'top_p' must be in (0, 1], got 0");
  const int64_t top_k = integer(body, "top_k", -1, kMax).value_or(0);
  s.top_k = top_k < 0 ? 0 : top_k;  // -1 means off, as in vLLM
  s.min_p = static_cast<float>(number(body, "min_p", 0.0, 1.0).value_or(0.0));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2.0, 2.0).value_or(0.0));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2.0, 2.0).value_or(0.0));
  s.repetition_penalty = static_cast<float>(number(body, "repetition_penalty", 1e-6, 1e6).value_or(1.0));
  if (const std::optional<int64_t> seed = integer(body, "seed", std::numeric_limits<int64_t>::min(), kMax)) {
    s.seed = static_cast<uint64_t>(*seed);
    r.seed_given = true;
  }
}

StructuredOutput schema_output(Json schema, std::string source, std::string prefix = "", std::string suffix = "") {
  StructuredOutput out;
  out.schema = std::move(schema);
  out.source = std::move(source);
  out.prefix = std::move(prefix);
  out.suffix = std::move(suffix);
  return out;
}

std::optional<StructuredOutput> response_format(const Json& format) {
  PLUMB_CHECK(format.is_object() && format.contains("type") && format["type"].is_string(),
              "'response_format' must be an object with a string 'type', got {}", format.dump());
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return schema_output(Json{{"type", "object"}}, "'response_format'");
  PLUMB_CHECK(type == "json_schema", "'response_format.type' must be text, json_object or json_schema, got \"{}\"",
              type);
  const Json* spec = field(format, "json_schema");
  PLUMB_CHECK(spec && spec->is_object(), "'response_format.json_schema' must be an object");
  if (const Json* name = field(*spec, "name"))
    PLUMB_CHECK(name->is_string(), "'response_format.json_schema.name' must be a string");
  if (const Json* strict = field(*spec, "strict"))
    PLUMB_CHECK(strict->is_boolean(), "'response_format.json_schema.strict' must be a boolean");
  const Json* schema = field(*spec, "schema");
  PLUMB_CHECK(schema, "'response_format.json_schema.schema' is a required property");
  return schema_output(*schema, "'response_format.json_schema.schema'");
}

// The schema of one call of `function` in Qwen3's tool-call body: {"name": ..., "arguments": {...}}.
Json tool_call_schema(const Json& function) {
  const Json parameters = function.contains("parameters") ? function["parameters"] : Json{{"type", "object"}};
  return Json{{"type", "object"},
              {"properties", {{"name", {{"const", function["name"]}}}, {"arguments", parameters}}},
              {"required", {"name", "arguments"}},
              {"additionalProperties", false}};
}

// tool_choice "required" (any of the tools) or {"type": "function", "function": {"name"}} (that one), as a
// constraint; "auto" and "none" constrain nothing.
std::optional<StructuredOutput> forced_tool_call(const Json& choice, const Json& tools) {
  std::string name;
  if (choice.is_string()) {
    const std::string c = choice.get<std::string>();
    PLUMB_CHECK(c == "auto" || c == "none" || c == "required",
                "'tool_choice' must be \"auto\", \"none\", \"required\" or a function, got \"{}\"", c);
    if (c != "required") return std::nullopt;
  } else {
    PLUMB_CHECK(has_type(choice, "function") && choice.contains("function") && choice["function"].is_object() &&
                    choice["function"].contains("name") && choice["function"]["name"].is_string(),
                "'tool_choice' must be a string or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
    name = choice["function"]["name"].get<std::string>();
  }
  PLUMB_CHECK(!tools.is_null(), "'tool_choice' {} needs 'tools'", choice.dump());
  Json calls = Json::array();
  for (const Json& tool : tools)
    if (name.empty() || tool["function"]["name"] == name) calls.push_back(tool_call_schema(tool["function"]));
  PLUMB_CHECK(!calls.empty(), "'tool_choice' names the function '{}', which is not in 'tools'", name);
  const std::string source = name.empty() ? "the tools' parameters" : "the parameters of tool '" + name + "'";
  return schema_output(calls.size() == 1 ? calls[0] : Json{{"anyOf", calls}}, source, "<tool_call>\n",
                       "\n</tool_call>");
}

void parse_common(const Json& body, ApiRequest& r) {
  // Optional, as in llama.cpp's server: one model is served.
  if (const Json* model = field(body, "model")) {
    PLUMB_CHECK(model->is_string(), "'model' must be a string, got {}", model->dump());
    r.model = model->get<std::string>();
  }
  PLUMB_CHECK(integer(body, "n", 1, 1).value_or(1) == 1, "'n' must be 1");
  if (const Json* best_of = field(body, "best_of"))
    PLUMB_CHECK(*best_of == 1, "'best_of' other than 1 is not supported, got {}", best_of->dump());
  const std::optional<int64_t> max_tokens = integer(body, "max_tokens", 1, INT32_MAX);
  const std::optional<int64_t> max_completion = integer(body, "max_completion_tokens", 1, INT32_MAX);
  r.max_tokens = max_completion ? max_completion : max_tokens;
  parse_sampling(body, r);

  if (const Json* stop = field(body, "stop")) {
    const Json list = stop->is_array() ? *stop : Json::array({*stop});
    PLUMB_CHECK(list.size() <= kMaxStops, "'stop' holds at most {} sequences, got {}", kMaxStops, list.size());
    for (const Json& s : list) {
      if (s.is_number_integer()) {
        r.stop_ids.push_back(token_id(s, "stop"));
        continue;
      }
      PLUMB_CHECK(s.is_string(), "'stop' must be a string or a list of strings and token ids, got {}", stop->dump());
      if (!s.get<std::string>().empty()) r.stop.push_back(s.get<std::string>());
    }
  }
  if (const Json* ids = field(body, "stop_token_ids")) {
    PLUMB_CHECK(ids->is_array(), "'stop_token_ids' must be a list of token ids, got {}", ids->dump());
    for (const Json& id : *ids) r.stop_ids.push_back(token_id(id, "stop_token_ids"));
  }
  r.ignore_eos = boolean(body, "ignore_eos");
  r.stream = boolean(body, "stream");
  if (const Json* options = field(body, "stream_options")) {
    PLUMB_CHECK(r.stream, "'stream_options' is only allowed when 'stream' is true");
    PLUMB_CHECK(options->is_object(), "'stream_options' must be an object, got {}", options->dump());
    r.include_usage = boolean(*options, "include_usage");
  }
  if (const Json* bias = field(body, "logit_bias"))
    PLUMB_CHECK(bias->is_object() && bias->empty(), "'logit_bias' is not supported");
  if (const Json* format = field(body, "response_format")) r.structured = response_format(*format);
  // vLLM's extras: a regular expression or a GBNF grammar the whole answer follows.
  for (const char* key : {"guided_regex", "guided_grammar"}) {
    const Json* text = field(body, key);
    if (!text) continue;
    PLUMB_CHECK(text->is_string(), "'{}' must be a string, got {}", key, text->dump());
    PLUMB_CHECK(!r.structured, "'{}' cannot be combined with 'response_format', 'guided_regex' or 'guided_grammar'",
                key);
    StructuredOutput out;
    out.source = fmt::format("'{}'", key);
    (std::string_view(key) == "guided_regex" ? out.regex : out.gbnf) = text->get<std::string>();
    r.structured = std::move(out);
  }
}

// One message's content as the template expects it: a string, null, or text parts joined.
Json message_content(const Json& content, size_t index) {
  if (content.is_null() || content.is_string()) return content;
  PLUMB_CHECK(content.is_array(), "'messages[{}].content' must be a string or a list of parts", index);
  std::string text;
  for (const Json& part : content) {
    PLUMB_CHECK(has_type(part, "text") && part.contains("text") && part["text"].is_string(),
                "'messages[{}].content': only text parts are supported, got {}", index, part.dump());
    text += part["text"].get<std::string>();
  }
  return text;
}

void parse_chat(const Json& body, ApiRequest& r) {
  const Json* messages = field(body, "messages");
  PLUMB_CHECK(messages, "'messages' is a required property");
  PLUMB_CHECK(messages->is_array() && !messages->empty(), "'messages' must be a non-empty list");
  r.messages = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    PLUMB_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
                "'messages[{}]' must be an object with a string 'role'", i);
    Json message = m;
    std::string role = m["role"].get<std::string>();
    PLUMB_CHECK(role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool",
                "'messages[{}].role' must be system, developer, user, assistant or tool, got '{}'", i, role);
    if (role == "developer") message["role"] = "system";  // OpenAI's newer name; chat templates know "system"
    message["content"] = message_content(m.contains("content") ? m["content"] : Json(), i);
    r.messages.push_back(std::move(message));
  }
  if (const Json* tools = field(body, "tools")) {
    PLUMB_CHECK(tools->is_array(), "'tools' must be a list, got {}", tools->dump());
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      PLUMB_CHECK(has_type(t, "function") && t.contains("function") && t["function"].is_object() &&
                      t["function"].contains("name") && t["function"]["name"].is_string(),
                  "'tools[{}]' must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i);
    }
    if (!tools->empty()) r.tools = *tools;
  }
  if (const Json* tool_choice = field(body, "tool_choice")) {
    if (std::optional<StructuredOutput> call = forced_tool_call(*tool_choice, r.tools)) {
      PLUMB_CHECK(
          !r.structured,
          "a forced 'tool_choice' cannot be combined with 'response_format', 'guided_regex' or 'guided_grammar'");
      r.structured = std::move(call);
    }
    if (*tool_choice == "none") r.tools = Json();
  }
  r.parse_tool_calls = !r.tools.is_null();
  if (const Json* kwargs = field(body, "chat_template_kwargs")) {
    PLUMB_CHECK(kwargs->is_object(), "'chat_template_kwargs' must be an object, got {}", kwargs->dump());
    r.template_kwargs = *kwargs;
  }
  const bool logprobs = boolean(body, "logprobs");
  const std::optional<int64_t> top = integer(body, "top_logprobs", 0, kMaxChatTopLogprobs);
  PLUMB_CHECK(!top || logprobs, "'top_logprobs' needs 'logprobs' set to true");
  if (logprobs) r.top_logprobs = static_cast<int32_t>(top.value_or(0));
}

void parse_completion(const Json& body, ApiRequest& r) {
  const Json* prompt = field(body, "prompt");
  PLUMB_CHECK(prompt, "'prompt' is a required property");
  Json p = *prompt;
  // A list of one prompt (text or ids) is that prompt; several prompts in one request are not supported.
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = Json(p[0]);
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
    PLUMB_CHECK(!r.prompt_text.empty(), "'prompt' is empty");
  } else {
    PLUMB_CHECK(p.is_array() && !p.empty(),
                "'prompt' must be a string or a list of token ids (one prompt per request)");
    for (const Json& id : p) r.prompt_ids.push_back(token_id(id, "prompt"));
    r.prompt_is_ids = true;
  }
  PLUMB_CHECK(!boolean(body, "echo"), "'echo' is not supported");
  PLUMB_CHECK(!field(body, "suffix"), "'suffix' is not supported");
  if (const std::optional<int64_t> n = integer(body, "logprobs", 0, kMaxCompletionLogprobs))
    r.top_logprobs = static_cast<int32_t>(*n);
}

}  // namespace

ApiRequest parse_api_request(Endpoint endpoint, const Json& body) {
  PLUMB_CHECK(body.is_object(), "the request body must be a JSON object");
  ApiRequest r;
  r.endpoint = endpoint;
  parse_common(body, r);
  if (endpoint == Endpoint::kChatCompletions) {
    parse_chat(body, r);
  } else {
    parse_completion(body, r);
  }
  return r;
}

Json error_json(const std::string& message, const std::string& type, const std::optional<std::string>& code) {
  return Json{
      {"error",
       {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code ? Json(*code) : Json(nullptr)}}}};
}

HttpResponse error_response(int status, const std::string& message, const std::optional<std::string>& code) {
  const char* type = status >= 500 ? "server_error" : "invalid_request_error";
  if (status == 429) type = "rate_limit_error";
  return HttpResponse{status, "application/json", dump_json(error_json(message, type, code)), {}};
}

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace plumb::server
