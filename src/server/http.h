// A small HTTP/1.1 server: one thread per connection, keep-alive, Content-Length request bodies, responses either
// whole or streamed with chunked transfer encoding (for server-sent events). Handlers can ask whether the client has
// gone, so a stream can be cancelled the moment its client disconnects. stop() closes the listener, ends idle
// connections, and run() returns once every connection thread has finished.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace plumb::server {

struct HttpRequest {
  std::string method;
  std::string path;                            // without the query
  std::string query;                           // after '?', undecoded
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

struct HttpLimits {
  size_t max_header_bytes = 64 * 1024;
  size_t max_body_bytes = 8 * 1024 * 1024;  // larger bodies get 413
  int max_connections = 1024;               // more are answered 503 and closed
  int idle_timeout_ms = 60 * 1000;          // a keep-alive connection idle this long is closed
  int send_timeout_ms = 30 * 1000;          // a client that reads nothing this long is dropped
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
  // Accepts connections until stop(); returns after every connection thread has ended.
  void run();
  // Thread-safe; makes run() return once in-flight handlers have finished.
  void stop();

 private:
  struct Connection {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void serve_connection(int fd);
  void reap(bool all);

  HttpHandler handler_;
  HttpErrorBody error_body_;
  HttpLimits limits_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};  // stop() writes to it to wake the accept loop
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::list<Connection> connections_;  // touched only by run()'s thread
};

}  // namespace plumb::server
