// The OpenAI request bodies plumb serve accepts, parsed and validated into one struct. A field of the wrong type or
// out of range throws plumb::Error naming the field (the server answers 400 with OpenAI's error body).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "server/http.h"

namespace plumb::server {

using Json = nlohmann::ordered_json;  // ordered: tools reach the chat template in the client's key order

enum class Endpoint { kCompletions, kChatCompletions };

// An answer constrained to JSON: response_format json_object or json_schema, or a forced tool call (its arguments
// following the tool's parameters, written in the model's tool-call syntax).
struct StructuredOutput {
  Json schema;         // the JSON Schema the value follows ({"type": "object"} for json_object)
  std::string prefix;  // literal text before the value
  std::string suffix;  // and after it
  std::string source;  // where the schema came from, for errors ("'response_format.json_schema.schema'")
  // Instead of a schema: a regular expression the whole answer matches, or a GBNF grammar it follows.
  std::optional<std::string> regex, gbnf;
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::optional<std::string> model;  // absent: the served model
  // /v1/chat/completions
  Json messages;                          // [{role, content, ...}], content as the template expects it
  Json tools;                             // null or [{type: "function", function: {...}}]
  bool parse_tool_calls = false;          // tools given and tool_choice is not "none"
  Json template_kwargs = Json::object();  // chat_template_kwargs (enable_thinking, ...)
  // /v1/completions
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;  // when the prompt was given as token ids
  bool prompt_is_ids = false;

  std::optional<int64_t> max_tokens;  // max_completion_tokens or max_tokens; absent: up to the context
  SamplingParams sampling;
  bool seed_given = false;  // sampling.seed came with the request; otherwise the server draws a fresh one
  std::vector<std::string> stop;
  std::vector<int32_t> stop_ids;  // from stop_token_ids and integers in stop
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t top_logprobs = -1;   // -1: no logprobs
  std::optional<StructuredOutput> structured;
};

// Parses a request body. Throws plumb::Error on anything invalid or unsupported.
ApiRequest parse_api_request(Endpoint endpoint, const Json& body);

// OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
Json error_json(const std::string& message, const std::string& type, const std::optional<std::string>& code);

// An HTTP response carrying OpenAI's error body; the error type follows the status (invalid_request_error for 4xx,
// server_error for 5xx).
HttpResponse error_response(int status, const std::string& message, const std::optional<std::string>& code = {});

// JSON text of `j` with invalid UTF-8 (a token may end inside a character) replaced by U+FFFD.
std::string dump_json(const Json& j);

}  // namespace plumb::server
