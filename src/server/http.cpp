#include "server/http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace plumb::server {

namespace {

constexpr int kPollMs = 100;  // how often blocked loops look at the stop flag

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return std::string(s);
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string response_head(int status, const std::string& content_type,
                          const std::vector<std::pair<std::string, std::string>>& extra, const std::string& framing,
                          bool keep_alive) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  head += "Content-Type: " + content_type + "\r\n";
  if (!framing.empty()) head += framing + "\r\n";
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : extra) head += name + ": " + value + "\r\n";
  return head + "\r\n";
}

// Whether the peer has closed its side: a hang-up, an error, or readable with nothing to read.
bool peer_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char byte;
  return (p.revents & POLLIN) && ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

class ConnectionExchange final : public HttpExchange {
 public:
  ConnectionExchange(int fd, bool keep_alive) : fd_(fd), keep_alive_(keep_alive) {}

  void reply(const HttpResponse& r) override {
    PLUMB_CHECK(!answered_, "an HTTP request was answered twice");
    answered_ = true;
    // A 204 has no body and, by RFC 9110, no Content-Length.
    const std::string framing = r.status == 204 ? "" : "Content-Length: " + std::to_string(r.body.size());
    std::vector<std::pair<std::string, std::string>> headers = r.headers;
    headers.insert(headers.end(), added_headers_.begin(), added_headers_.end());
    broken_ = !send_all(fd_, response_head(r.status, r.content_type, headers, framing, keep_alive_) + r.body);
  }
  void begin_stream(int status, const std::string& content_type) override {
    PLUMB_CHECK(!answered_, "an HTTP request was answered twice");
    answered_ = streaming_ = true;
    std::vector<std::pair<std::string, std::string>> extra = {{"Cache-Control", "no-cache"},
                                                              {"X-Accel-Buffering", "no"}};
    extra.insert(extra.end(), added_headers_.begin(), added_headers_.end());
    broken_ = !send_all(fd_, response_head(status, content_type, extra, "Transfer-Encoding: chunked", keep_alive_));
  }
  bool write(std::string_view data) override {
    if (broken_ || data.empty()) return !broken_;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    broken_ = !send_all(fd_, std::string(size) + std::string(data) + "\r\n");
    return !broken_;
  }
  void end_stream() override {
    if (!streaming_ || ended_) return;
    ended_ = true;
    if (!broken_) broken_ = !send_all(fd_, "0\r\n\r\n");
  }
  bool client_gone() override { return broken_ || peer_closed(fd_); }

  bool answered() const { return answered_; }
  bool reusable() const { return keep_alive_ && !broken_; }

 private:
  int fd_;
  bool keep_alive_;
  bool answered_ = false, streaming_ = false, ended_ = false, broken_ = false;
};

}  // namespace

std::string HttpRequest::header(const std::string& lower_name) const {
  const auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

HttpServer::HttpServer(const std::string& host, uint16_t port, HttpHandler handler, HttpErrorBody error_body,
                       HttpLimits limits)
    : handler_(std::move(handler)), error_body_(std::move(error_body)), limits_(limits) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  PLUMB_CHECK(rc == 0 && found, "--host {}: cannot resolve it ({})", host, ::gai_strerror(rc));
  std::string error;
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  PLUMB_CHECK(listen_fd_ >= 0, "cannot listen on {}:{}: {}", host, port, error);
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  PLUMB_CHECK(::pipe2(wake_pipe_, O_CLOEXEC) == 0, "cannot create a pipe: {}", std::strerror(errno));
}

HttpServer::~HttpServer() {
  stop();
  reap(true);
  for (int fd : {listen_fd_, wake_pipe_[0], wake_pipe_[1]})
    if (fd >= 0) ::close(fd);
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_pipe_[1], &byte, 1);
}

void HttpServer::reap(bool all) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (all || it->done) {
      it->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void HttpServer::run() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, 1000) <= 0 || !(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    reap(false);
    if (static_cast<int>(connections_.size()) >= limits_.max_connections) {
      const HttpResponse r = error_body_(503, "the server has too many open connections; try again later");
      send_all(fd, response_head(r.status, r.content_type, r.headers,
                                 "Content-Length: " + std::to_string(r.body.size()), false) +
                       r.body);
      ::close(fd);
      continue;
    }
    Connection& c = connections_.emplace_back();
    c.thread = std::thread([this, fd, &c] {
      serve_connection(fd);
      c.done = true;
    });
  }
  reap(true);
}

void HttpServer::serve_connection(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // each SSE event goes out at once
  const timeval send_timeout{limits_.send_timeout_ms / 1000, (limits_.send_timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
  // Answers and ends the connection. The unread rest of the request is drained for a while first: closing a socket
  // with unread input resets the connection, and the client would lose the answer while still sending.
  auto refuse = [&](int status, const std::string& message) {
    ConnectionExchange exchange(fd, false);
    exchange.reply(error_body_(status, message));
    ::shutdown(fd, SHUT_WR);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    char sink[16384];
    while (!stopping_ && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, kPollMs) > 0 && ::recv(fd, sink, sizeof sink, 0) <= 0) break;
    }
  };
  // Reads more bytes into `buffer`; false on close, error, stop or idle timeout.
  std::string buffer;
  auto read_more = [&]() {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      if (stopping_) return false;
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, kPollMs);
      if (ready < 0 && errno != EINTR) return false;
      if (ready > 0) {
        char chunk[16384];
        const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) return false;
        buffer.append(chunk, static_cast<size_t>(n));
        return true;
      }
      if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(limits_.idle_timeout_ms)) return false;
    }
  };

  for (;;) {
    size_t head_end;
    bool open = true;
    while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos &&
           (open = buffer.size() <= limits_.max_header_bytes))
      if (!read_more()) break;
    if (head_end == std::string::npos) {
      if (!open) refuse(431, "the request headers are too large");
      break;
    }
    HttpRequest request;
    bool http11 = false;
    {
      const std::string head = buffer.substr(0, head_end);
      size_t line_end = head.find("\r\n");
      const std::string line = head.substr(0, line_end);
      const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
      if (sp1 == std::string::npos || sp2 <= sp1 || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
        refuse(400, "malformed HTTP request line");
        break;
      }
      request.method = line.substr(0, sp1);
      const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
      const size_t q = target.find('?');
      request.path = target.substr(0, q);
      if (q != std::string::npos) request.query = target.substr(q + 1);
      http11 = line.substr(sp2 + 1) == "HTTP/1.1";
      while (line_end != std::string::npos && line_end < head.size()) {
        const size_t next = head.find("\r\n", line_end + 2);
        const std::string field =
            head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
        const size_t colon = field.find(':');
        if (colon != std::string::npos)
          request.headers[lower(trim(field.substr(0, colon)))] = trim(field.substr(colon + 1));
        line_end = next;
      }
    }
    if (!request.header("transfer-encoding").empty()) {
      refuse(411, "chunked request bodies are not supported; send Content-Length");
      break;
    }
    size_t length = 0;
    const std::string length_text = request.header("content-length");
    if (!length_text.empty()) {
      char* end = nullptr;
      const unsigned long long parsed = std::strtoull(length_text.c_str(), &end, 10);
      if (*end != '\0' || length_text[0] == '-') {
        refuse(400, "malformed Content-Length");
        break;
      }
      if (parsed > limits_.max_body_bytes) {
        refuse(413, "the request body is larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
        break;
      }
      length = static_cast<size_t>(parsed);
    }
    if (lower(request.header("expect")) == "100-continue" && buffer.size() < head_end + 4 + length &&
        !send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n"))
      break;
    bool complete = true;
    while (buffer.size() < head_end + 4 + length && (complete = read_more())) {
    }
    if (!complete) break;
    request.body = buffer.substr(head_end + 4, length);
    buffer.erase(0, head_end + 4 + length);

    const std::string connection = lower(request.header("connection"));
    const bool keep_alive = !stopping_ && (http11 ? connection != "close" : connection == "keep-alive");
    ConnectionExchange exchange(fd, keep_alive);
    try {
      handler_(request, exchange);
    } catch (const std::exception& e) {
      if (!exchange.answered()) exchange.reply(error_body_(500, e.what()));
    }
    if (!exchange.answered()) exchange.reply(error_body_(500, "the handler gave no response"));
    exchange.end_stream();
    if (!exchange.reusable()) break;
  }
  ::close(fd);
}

}  // namespace plumb::server
