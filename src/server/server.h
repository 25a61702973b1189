// plumb serve's HTTP front end: routes, API-key check, model list, health, metrics and the chat page, over one
// Engine and the model folder's text side. Generation requests go to serve_generation (generation.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "server/access.h"
#include "server/generation.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/prompt.h"
#include "server/server_log.h"

namespace plumb::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;    // 0: an ephemeral port
  std::string api_key;     // empty: no key needed
  std::string model_name;  // the id of the one model served
  HttpLimits limits;
  LogFormat log_format = LogFormat::kNone;       // access and throughput lines on stderr
  std::chrono::milliseconds log_interval{5000};  // between throughput lines while busy
  std::vector<std::string> allowed_origins;      // CORS (access.h); empty: none
  bool metrics_need_key = false;                 // /metrics asks for the API key too
};

class Server {
 public:
  // Binds the port at once (throws plumb::Error when it cannot); `engine` and `text` must outlive the server.
  Server(Engine& engine, const ModelText& text, ServerOptions options);
  uint16_t port() const { return http_->port(); }
  // Serves until stop(); returns once every connection has been answered and closed.
  void run() { http_->run(); }
  // Thread-safe. Stops accepting; idle connections close. In-flight requests end when the engine stops.
  void stop() { http_->stop(); }

 private:
  void handle(const HttpRequest& request, HttpExchange& exchange);
  // `generation` is set for a generation request, for its access line.
  int route(const HttpRequest& request, HttpExchange& exchange, const std::string& endpoint,
            std::optional<GenerationRecord>& generation);
  int generate(const HttpRequest& request, HttpExchange& exchange, Endpoint endpoint,
               std::optional<GenerationRecord>& generation);
  int reply(HttpExchange& exchange, const HttpResponse& response);
  std::optional<HttpResponse> key_refusal(const HttpRequest& request) const;

  ServerOptions options_;
  Metrics metrics_;
  StructuredOutputs structured_;
  ServedModel model_;
  int64_t created_;
  ServerLog log_;  // before http_, so connection threads have ended before it goes
  std::unique_ptr<HttpServer> http_;
  AccessPolicy access_;
};

}  // namespace plumb::server
