#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "server/http_parser.h"

namespace plumb::server {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kTick = std::chrono::milliseconds(100);  // how often deadlines are checked
constexpr auto kLinger = std::chrono::seconds(2);       // a refused connection's input is drained this long
constexpr size_t kReadBudget = 256 * 1024;  // bytes read from one connection per wake-up, so none starves the rest
constexpr int kMaxRefusing = 1024;          // refused connections still draining, beyond the connection cap

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// Sends all of `data` on a non-blocking socket, waiting for room at most `timeout_ms` at a time.
bool send_all(int fd, std::string_view data, int timeout_ms) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    pollfd p{fd, POLLOUT, 0};
    const int ready = ::poll(&p, 1, timeout_ms);
    if (ready == 0 || (ready < 0 && errno != EINTR) || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
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
    case 408:
      return "Request Timeout";
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
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
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

// A whole answer that ends the connection: `status` with the error body the server gives it.
std::string refusal(const HttpErrorBody& error_body, int status, const std::string& message) {
  const HttpResponse r = error_body(status, message);
  return response_head(r.status, r.content_type, r.headers, "Content-Length: " + std::to_string(r.body.size()), false) +
         r.body;
}

class ConnectionExchange final : public HttpExchange {
 public:
  ConnectionExchange(int fd, bool keep_alive, int send_timeout_ms)
      : fd_(fd), keep_alive_(keep_alive), send_timeout_ms_(send_timeout_ms) {}

  void reply(const HttpResponse& r) override {
    PLUMB_CHECK(!answered_, "an HTTP request was answered twice");
    answered_ = true;
    // A 204 has no body and, by RFC 9110, no Content-Length.
    const std::string framing = r.status == 204 ? "" : "Content-Length: " + std::to_string(r.body.size());
    std::vector<std::pair<std::string, std::string>> headers = r.headers;
    headers.insert(headers.end(), added_headers_.begin(), added_headers_.end());
    send(response_head(r.status, r.content_type, headers, framing, keep_alive_) + r.body);
  }
  void begin_stream(int status, const std::string& content_type) override {
    PLUMB_CHECK(!answered_, "an HTTP request was answered twice");
    answered_ = streaming_ = true;
    std::vector<std::pair<std::string, std::string>> extra = {{"Cache-Control", "no-cache"},
                                                              {"X-Accel-Buffering", "no"}};
    extra.insert(extra.end(), added_headers_.begin(), added_headers_.end());
    send(response_head(status, content_type, extra, "Transfer-Encoding: chunked", keep_alive_));
  }
  bool write(std::string_view data) override {
    if (broken_ || data.empty()) return !broken_;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    send(std::string(size) + std::string(data) + "\r\n");
    return !broken_;
  }
  void end_stream() override {
    if (!streaming_ || ended_) return;
    ended_ = true;
    send("0\r\n\r\n");
  }
  bool client_gone() override { return broken_ || peer_closed(fd_); }

  bool answered() const { return answered_; }
  bool reusable() const { return keep_alive_ && !broken_; }

 private:
  void send(std::string_view data) {
    if (!broken_) broken_ = !send_all(fd_, data, send_timeout_ms_);
  }

  int fd_;
  bool keep_alive_;
  int send_timeout_ms_;
  bool answered_ = false, streaming_ = false, ended_ = false, broken_ = false;
};

std::string client_address(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  else if (address.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  return text;
}

// Lets the process hold `wanted` descriptors when the hard limit allows (a soft limit of 1,024 is common).
void allow_descriptors(rlim_t wanted) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= wanted) return;
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

// The epoll loop (run()'s thread) owns every connection that is reading a request or being refused; a worker owns
// one while its handler runs, and hands it back through `returned` and the wake-up eventfd.
struct HttpServer::Loop {
  struct Connection {
    enum class Phase { kReading, kBusy, kClosing };
    Connection(int fd, std::string client, const HttpLimits& limits)
        : fd(fd), client(std::move(client)), parser(limits.max_header_bytes, limits.max_body_bytes) {}
    int fd;
    std::string client;
    RequestParser parser;
    Phase phase = Phase::kReading;
    bool counted = false;          // in the connection caps (refused connections are not)
    bool request_started = false;  // since: the request's first byte, else when the connection became idle
    bool continue_sent = false;    // 100 Continue for this request
    Clock::time_point since = Clock::now();
    std::string out;    // bytes the loop still has to send: 100 Continue or a refusal
    bool shut = false;  // a refusal sent in full, our side shut down
  };
  struct Job {
    int fd;
    HttpRequest request;
    bool keep_alive;
    std::string preamble;  // a 100 Continue not yet sent, which must precede the answer
  };

  explicit Loop(HttpServer& server) : server(server) {
    epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    PLUMB_CHECK(epoll_fd >= 0 && wake_fd >= 0, "cannot create the HTTP event loop: {}", std::strerror(errno));
    watch(server.listen_fd_, EPOLL_CTL_ADD, EPOLLIN);
    watch(wake_fd, EPOLL_CTL_ADD, EPOLLIN);
  }
  ~Loop() {
    for (auto& [fd, c] : connections) ::close(fd);
    ::close(epoll_fd);
    ::close(wake_fd);
  }

  void watch(int fd, int op, uint32_t events) {
    epoll_event e{};
    e.events = events;
    e.data.fd = fd;
    ::epoll_ctl(epoll_fd, op, fd, &e);
  }
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  void run();
  void accept_all();
  void on_readable(Connection& c);
  void advance(Connection& c);
  void dispatch(Connection& c);
  void refuse(Connection& c, int status, const std::string& message);
  void flush(Connection& c);
  void close_connection(int fd);
  void take_returned();
  void check_deadlines();
  void work();

  HttpServer& server;
  int epoll_fd = -1, wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::unordered_map<int, std::unique_ptr<Connection>> connections;
  std::unordered_map<std::string, int> per_client;  // counted connections by client address
  int counted = 0, refusing = 0, busy = 0;
  std::optional<Clock::time_point> accept_paused_until;  // out of descriptors: accepting waits a tick

  std::mutex mutex;  // guards the pool's state below
  std::condition_variable job_ready;
  std::deque<Job> jobs;
  std::vector<std::pair<int, bool>> returned;  // (fd, reusable) from workers
  std::vector<std::thread> workers;
  int idle_workers = 0;
  bool quit = false;
};

void HttpServer::Loop::run() {
  bool stopped = false;
  auto last_tick = Clock::now();
  while (!stopped || busy > 0) {
    epoll_event events[256];
    const int n = ::epoll_wait(epoll_fd, events, 256, static_cast<int>(kTick.count()));
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == server.listen_fd_) {
        accept_all();
      } else if (fd == wake_fd) {
        uint64_t count;
        [[maybe_unused]] const ssize_t r = ::read(wake_fd, &count, sizeof count);
        take_returned();
      } else if (const auto it = connections.find(fd); it != connections.end()) {
        Connection& c = *it->second;
        if (events[i].events & EPOLLOUT) flush(c);
        if (connections.count(fd) && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_readable(c);
      }
    }
    if (stopping && !stopped) {
      stopped = true;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, server.listen_fd_, nullptr);
      std::vector<int> idle;
      for (const auto& [fd, c] : connections)
        if (c->phase != Connection::Phase::kBusy) idle.push_back(fd);
      for (const int fd : idle) close_connection(fd);
    }
    if (Clock::now() - last_tick >= kTick) {
      last_tick = Clock::now();
      check_deadlines();
    }
  }
  {
    std::lock_guard lock(mutex);
    quit = true;
  }
  job_ready.notify_all();
  for (std::thread& t : workers) t.join();
  workers.clear();
}

void HttpServer::Loop::accept_all() {
  for (;;) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    const int fd =
        ::accept4(server.listen_fd_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the listener would stay readable and spin the loop, so it rests for a tick.
        watch(server.listen_fd_, EPOLL_CTL_MOD, 0);
        accept_paused_until = Clock::now() + kTick;
      }
      return;
    }
    if (stopping || refusing >= kMaxRefusing) {
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // each SSE event goes out at once
    auto owned = std::make_unique<Connection>(fd, client_address(address), server.limits_);
    Connection& c = *owned;
    connections.emplace(fd, std::move(owned));
    watch(fd, EPOLL_CTL_ADD, EPOLLIN);
    const HttpLimits& limits = server.limits_;
    if (counted >= limits.max_connections) {
      refuse(c, 503, "the server has too many open connections; try again later");
    } else if (per_client[c.client] >= limits.max_client_connections) {
      refuse(c, 429,
             "this client has " + std::to_string(limits.max_client_connections) +
                 " connections open (the limit); close some or try again later");
    } else {
      c.counted = true;
      ++counted;
      ++per_client[c.client];
    }
  }
}

void HttpServer::Loop::on_readable(Connection& c) {
  char chunk[16384];
  for (size_t total = 0; total < kReadBudget;) {
    const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      // The client is gone (or shut its side): a request it finished sending is still answered.
      if (c.phase == Connection::Phase::kReading && c.parser.state() == RequestParser::State::kComplete)
        dispatch(c);
      else
        close_connection(c.fd);
      return;
    }
    total += static_cast<size_t>(n);
    if (c.phase == Connection::Phase::kClosing) continue;  // a refused request's rest is drained unread
    if (c.parser.feed(std::string_view(chunk, static_cast<size_t>(n))) != RequestParser::State::kNeedMore) break;
  }
  if (c.phase == Connection::Phase::kReading) advance(c);
}

void HttpServer::Loop::advance(Connection& c) {
  const RequestParser::State state = c.parser.state();
  if (state == RequestParser::State::kComplete) return dispatch(c);
  if (state == RequestParser::State::kError) return refuse(c, c.parser.error_status(), c.parser.error_message());
  if (!c.request_started && c.parser.started()) {
    c.request_started = true;
    c.since = Clock::now();
  }
  if (c.parser.awaits_continue() && !c.continue_sent) {
    c.continue_sent = true;
    c.out += "HTTP/1.1 100 Continue\r\n\r\n";
    flush(c);
  }
}

void HttpServer::Loop::dispatch(Connection& c) {
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  c.phase = Connection::Phase::kBusy;
  ++busy;
  HttpRequest request = c.parser.take();
  const std::string connection = lower(request.header("connection"));
  const bool keep_alive =
      !stopping && (request.version == "HTTP/1.1" ? connection != "close" : connection == "keep-alive");
  {
    std::lock_guard lock(mutex);
    jobs.push_back({c.fd, std::move(request), keep_alive, std::move(c.out)});
    if (static_cast<int>(jobs.size()) > idle_workers && static_cast<int>(workers.size()) < server.limits_.workers)
      workers.emplace_back([this] { work(); });
  }
  c.out.clear();
  job_ready.notify_one();
}

void HttpServer::Loop::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex);
      ++idle_workers;
      job_ready.wait(lock, [&] { return quit || !jobs.empty(); });
      --idle_workers;
      if (jobs.empty()) return;
      job = std::move(jobs.front());
      jobs.pop_front();
    }
    bool reusable = false;
    if (send_all(job.fd, job.preamble, server.limits_.send_timeout_ms)) {
      ConnectionExchange exchange(job.fd, job.keep_alive, server.limits_.send_timeout_ms);
      try {
        server.handler_(job.request, exchange);
      } catch (const std::exception& e) {
        if (!exchange.answered()) exchange.reply(server.error_body_(500, e.what()));
      }
      if (!exchange.answered()) exchange.reply(server.error_body_(500, "the handler gave no response"));
      exchange.end_stream();
      reusable = exchange.reusable();
    }
    {
      std::lock_guard lock(mutex);
      returned.emplace_back(job.fd, reusable);
    }
    wake();
  }
}

void HttpServer::Loop::take_returned() {
  std::vector<std::pair<int, bool>> back;
  {
    std::lock_guard lock(mutex);
    back.swap(returned);
  }
  for (const auto& [fd, reusable] : back) {
    Connection& c = *connections.at(fd);
    --busy;
    if (!reusable || stopping) {
      close_connection(fd);
      continue;
    }
    c.phase = Connection::Phase::kReading;
    c.request_started = c.continue_sent = false;
    c.since = Clock::now();
    watch(fd, EPOLL_CTL_ADD, EPOLLIN);
    c.parser.feed({});  // a pipelined request may already be whole
    advance(c);
  }
}

void HttpServer::Loop::refuse(Connection& c, int status, const std::string& message) {
  c.phase = Connection::Phase::kClosing;
  c.since = Clock::now();
  c.out += refusal(server.error_body_, status, message);
  if (!c.counted) ++refusing;
  flush(c);
}

// Sends what the loop holds for `c` without blocking; a refusal sent in full shuts our side, and its unread input is
// then drained for a while: closing with input unread resets the connection, and the client would lose the answer.
void HttpServer::Loop::flush(Connection& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      watch(c.fd, EPOLL_CTL_MOD, EPOLLIN | EPOLLOUT);
      return;
    }
    if (n <= 0) return close_connection(c.fd);
    c.out.erase(0, static_cast<size_t>(n));
  }
  watch(c.fd, EPOLL_CTL_MOD, EPOLLIN);
  if (c.phase == Connection::Phase::kClosing && !c.shut) {
    c.shut = true;
    ::shutdown(c.fd, SHUT_WR);
  }
}

void HttpServer::Loop::close_connection(int fd) {
  const auto it = connections.find(fd);
  Connection& c = *it->second;
  if (c.counted) {
    --counted;
    if (--per_client[c.client] == 0) per_client.erase(c.client);
  } else if (c.phase == Connection::Phase::kClosing) {
    --refusing;
  }
  ::close(fd);  // also leaves the epoll set
  connections.erase(it);
}

void HttpServer::Loop::check_deadlines() {
  const auto now = Clock::now();
  const HttpLimits& limits = server.limits_;
  if (accept_paused_until && now >= *accept_paused_until && !stopping) {
    accept_paused_until.reset();
    watch(server.listen_fd_, EPOLL_CTL_MOD, EPOLLIN);
  }
  std::vector<int> expired, late;
  for (const auto& [fd, c] : connections) {
    const auto age = now - c->since;
    if (c->phase == Connection::Phase::kClosing && age > kLinger) expired.push_back(fd);
    if (c->phase != Connection::Phase::kReading) continue;
    if (c->request_started && age > std::chrono::milliseconds(limits.request_timeout_ms)) late.push_back(fd);
    if (!c->request_started && age > std::chrono::milliseconds(limits.idle_timeout_ms)) expired.push_back(fd);
  }
  for (const int fd : expired) close_connection(fd);
  for (const int fd : late)
    refuse(*connections.at(fd), 408,
           fmt::format("the request did not arrive in full within {:g} s (the request timeout)",
                       limits.request_timeout_ms / 1000.0));
}

HttpServer::HttpServer(const std::string& host, uint16_t port, HttpHandler handler, HttpErrorBody error_body,
                       HttpLimits limits)
    : handler_(std::move(handler)), error_body_(std::move(error_body)), limits_(limits) {
  PLUMB_CHECK(limits_.max_connections >= 1 && limits_.max_client_connections >= 1 && limits_.workers >= 1 &&
                  limits_.request_timeout_ms >= 1 && limits_.idle_timeout_ms >= 1,
              "HTTP limits must be positive");
  allow_descriptors(static_cast<rlim_t>(limits_.max_connections) + kMaxRefusing + 256);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  PLUMB_CHECK(rc == 0 && found, "--host {}: cannot resolve it ({})", host, ::gai_strerror(rc));
  std::string error;
  for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) {
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
  loop_ = std::make_unique<Loop>(*this);
}

HttpServer::~HttpServer() {
  loop_.reset();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void HttpServer::stop() {
  if (loop_->stopping.exchange(true)) return;
  loop_->wake();
}

void HttpServer::run() {
  loop_->run();
}

}  // namespace plumb::server
