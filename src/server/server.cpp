#include "server/server.h"

#include <ctime>
#include <set>

#include "core/error.h"
#include "core/json_depth.h"
#include "server/chat_page.h"

namespace plumb::server {

namespace {

const std::set<std::string> kEndpoints = {"/",          "/health",         "/metrics",
                                          "/v1/models", "/v1/completions", "/v1/chat/completions"};

}  // namespace

Server::Server(Engine& engine, const ModelText& text, ServerOptions options)
    : options_(std::move(options)),
      structured_(text, engine.vocab_size()),
      model_{engine, text, metrics_, structured_, options_.model_name},
      created_(static_cast<int64_t>(std::time(nullptr))),
      log_(options_.log_format, options_.log_interval, metrics_, engine) {
  http_ = std::make_unique<HttpServer>(
      options_.host, options_.port, [this](const HttpRequest& r, HttpExchange& e) { handle(r, e); },
      [](int status, const std::string& message) { return error_response(status, message); }, options_.limits);
  PLUMB_CHECK(!options_.metrics_need_key || !options_.api_key.empty(), "--metrics-need-key needs --api-key");
  access_ = AccessPolicy{options_.host, http_->port(), !options_.api_key.empty(), options_.allowed_origins};
}

int Server::reply(HttpExchange& exchange, const HttpResponse& response) {
  exchange.reply(response);
  return response.status;
}

void Server::handle(const HttpRequest& request, HttpExchange& exchange) {
  std::string endpoint = request.path;
  if (endpoint.rfind("/v1/models/", 0) == 0) endpoint = "/v1/models/{id}";
  if (!kEndpoints.count(endpoint) && endpoint != "/v1/models/{id}") endpoint = "other";
  const auto received = std::chrono::steady_clock::now();
  std::optional<GenerationRecord> generation;
  for (auto& [name, value] : cors_headers(access_, request)) exchange.add_header(name, value);
  const std::optional<HttpResponse> early = answer_before_routing(access_, request);
  const int status = early ? reply(exchange, *early) : route(request, exchange, endpoint, generation);
  metrics_.count_request(endpoint, status);
  log_.request(request.method, request.path, status,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - received).count(), generation);
}

int Server::route(const HttpRequest& request, HttpExchange& exchange, const std::string& endpoint,
                  std::optional<GenerationRecord>& generation) {
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  if (endpoint == "other")
    return reply(exchange,
                 error_response(404, "Unknown request URL: " + request.method + " " + request.path, "unknown_url"));
  if (endpoint == "/" && get)
    return reply(exchange, {200, "text/html; charset=utf-8", std::string(chat_page_html()), {}});
  if (endpoint == "/health" && get) return reply(exchange, {200, "application/json", R"({"status":"ok"})", {}});
  if (endpoint == "/metrics" && get) {
    if (options_.metrics_need_key)
      if (const std::optional<HttpResponse> refused = key_refusal(request)) return reply(exchange, *refused);
    return reply(exchange, {200, "text/plain; version=0.0.4", metrics_.render(model_.engine.stats()), {}});
  }

  if (const std::optional<HttpResponse> refused = key_refusal(request)) return reply(exchange, *refused);
  const Json model = {{"id", model_.name},
                      {"object", "model"},
                      {"created", created_},
                      {"owned_by", "plumb"},
                      {"max_model_len", model_.engine.max_context()}};
  if (endpoint == "/v1/models" && get)
    return reply(exchange, {200, "application/json", dump_json({{"object", "list"}, {"data", {model}}}), {}});
  if (endpoint == "/v1/models/{id}" && get) {
    if (request.path.substr(std::string("/v1/models/").size()) != model_.name)
      return reply(exchange, error_response(404, "The model `" + request.path.substr(11) + "` does not exist",
                                            "model_not_found"));
    return reply(exchange, {200, "application/json", dump_json(model), {}});
  }
  if (endpoint == "/v1/completions" && post) return generate(request, exchange, Endpoint::kCompletions, generation);
  if (endpoint == "/v1/chat/completions" && post)
    return generate(request, exchange, Endpoint::kChatCompletions, generation);
  return reply(exchange,
               error_response(405, request.method + " is not allowed on " + request.path, "method_not_allowed"));
}

std::optional<HttpResponse> Server::key_refusal(const HttpRequest& request) const {
  if (options_.api_key.empty() || request.header("authorization") == "Bearer " + options_.api_key) return std::nullopt;
  const bool given = !request.header("authorization").empty();
  return error_response(401,
                        given
                            ? "Incorrect API key provided."
                            : "You didn't provide an API key. Provide it in the Authorization header as 'Bearer KEY'.",
                        "invalid_api_key");
}

int Server::generate(const HttpRequest& http, HttpExchange& exchange, Endpoint endpoint,
                     std::optional<GenerationRecord>& generation) {
  const auto received = std::chrono::steady_clock::now();
  // Copying, dumping and rendering a parsed value recurse once per level, so depth is bounded before parsing.
  if (const std::optional<JsonTooDeep> deep = json_too_deep(http.body))
    return reply(exchange, error_response(400, fmt::format("the request JSON nests deeper than {} levels (the limit), "
                                                           "at line {}",
                                                           kMaxJsonDepth, deep->line)));
  const Json body = Json::parse(http.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded())
    return reply(exchange, error_response(400,
                                          "We could not parse the JSON body of your request. The body must be "
                                          "valid JSON."));
  ApiRequest request;
  std::vector<int32_t> prompt;
  bool opens_reasoning = false;
  try {
    request = parse_api_request(endpoint, body);
    if (request.model && *request.model != model_.name)
      return reply(exchange,
                   error_response(404, "The model `" + *request.model + "` does not exist", "model_not_found"));
    if (endpoint == Endpoint::kChatCompletions) {
      const std::string text = model_.text.render_chat(request.messages, request.tools, request.template_kwargs);
      opens_reasoning = prompt_opens_reasoning(text);
      prompt = model_.text.encode(text);
    } else {
      prompt = request.prompt_is_ids ? request.prompt_ids : model_.text.encode(request.prompt_text);
    }
  } catch (const Error& e) {
    return reply(exchange, error_response(400, e.what()));
  }
  generation.emplace();
  return serve_generation(request, prompt, opens_reasoning, model_, exchange, received, *generation);
}

}  // namespace plumb::server
