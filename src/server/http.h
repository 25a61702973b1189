// A small HTTP/1.1 server: one epoll loop owns every connection, non-blocking, and reads each request incrementally
// (http_parser.h), so idle and slow connections cost no thread; a complete request goes to a bounded pool of worker
// threads that run the handler, whose answers are either whole or streamed with chunked transfer encoding (for
// server-sent events); a keep-alive connection then goes back to the loop. Handlers can ask whether the client has
// gone, so a stream can be cancelled the moment its client disconnects. stop() closes idle connections, and run()
// returns once every in-flight handler has finished.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace plumb::server {

struct HttpRequest {
  std::string method;
  std::string path;                            // without the query
  std::string query;                           // after '?', undecoded
  std::string version;                         // "HTTP/1.1" or "HTTP/1.0"
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  // The header's value, or "" when absent.
  std::string header(const std::string& lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// One request's side of a connection, given to the handler: reply() once, or begin_stream(), write()* and
// end_stream().
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void reply(const HttpResponse& response) = 0;
  virtual void begin_stream(int status, const std::string& content_type) = 0;
  virtual bool write(std::string_view data) = 0;  // one chunk; false once the client is gone
  virtual void end_stream() = 0;
  virtual bool client_gone() = 0;  // the client closed its side (checked without blocking)

  // A header for whichever answer follows, reply() or begin_stream() (CORS headers are set before routing).
  void add_header(std::string name, std::string value) {
    added_headers_.emplace_back(std::move(name), std::move(value));
  }

 protected:
  std::vector<std::pair<std::string, std::string>> added_headers_;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpExchange&)>;
// The response for a request the HTTP layer itself refuses (malformed, too large), given its status and message.
using HttpErrorBody = std::function<HttpResponse(int status, const std::string& message)>;

// Each is a flag of plumb serve where a user may need to change it (docs/server.md's limits list).
struct HttpLimits {
  size_t max_header_bytes = 64 * 1024;      // larger headers get 431
  size_t max_body_bytes = 8 * 1024 * 1024;  // larger bodies get 413
  int max_connections = 16384;              // open connections in all; more are answered 503 and closed
  int max_client_connections = 4096;        // open connections from one client address; more get 429 and a close
  int request_timeout_ms = 30 * 1000;       // from a request's first byte to its last; a slower one gets 408
  int idle_timeout_ms = 60 * 1000;          // a keep-alive connection idle this long is closed
  int send_timeout_ms = 30 * 1000;          // a client that reads nothing this long is dropped
  int workers = 512;  // threads running handlers (started as needed); more complete requests wait for one
};

class HttpServer {
 public:
  // Binds host:port (port 0: an ephemeral port) and listens. Throws plumb::Error when it cannot.
  HttpServer(const std::string& host, uint16_t port, HttpHandler handler, HttpErrorBody error_body,
             HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const { return port_; }
  // Serves connections until stop(); returns after every handler has ended.
  void run();
  // Thread-safe; makes run() return once in-flight handlers have finished.
  void stop();

 private:
  struct Loop;  // the epoll loop's state and the worker pool (http.cpp)
  HttpHandler handler_;
  HttpErrorBody error_body_;
  HttpLimits limits_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::unique_ptr<Loop> loop_;
};

}  // namespace plumb::server
