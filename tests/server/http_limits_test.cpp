// The HTTP layer's limits against a live server (issue 24): a deadline for a whole request header and body, and a
// per-client connection limit. Before them a header line a second kept a connection alive indefinitely (the idle
// timeout restarted with every byte), and one client's connections could take every slot.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "http_client.h"
#include "served.h"

namespace plumb::server {
namespace {

using Clock = std::chrono::steady_clock;
using test::HttpReply;

// Sends `request` a byte every `gap` until the server answers or closes; returns the answer and how long it took.
std::pair<HttpReply, double> trickle(uint16_t port, const std::string& request, std::chrono::milliseconds gap) {
  const int fd = test::connect_loopback(port);
  const auto start = Clock::now();
  for (const char c : request) {
    if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
    std::this_thread::sleep_for(gap);
    char peek;
    if (::recv(fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) >= 0) break;  // an answer (or a close) has come
  }
  const HttpReply reply = test::parse_reply(test::read_until_close(fd));
  ::close(fd);
  return {reply, std::chrono::duration<double>(Clock::now() - start).count()};
}

TEST(HttpLimits, ASlowHeaderGets408AtTheRequestDeadline) {
  ServerOptions options;
  options.limits.request_timeout_ms = 500;
  test::ServedModelFixture served(options);
  const std::string slow = "GET /health HTTP/1.1\r\nX-Slow: " + std::string(100, 'a') + "\r\n\r\n";
  const auto [reply, seconds] = trickle(served.port(), slow, std::chrono::milliseconds(50));
  EXPECT_EQ(reply.status, 408) << reply.body;
  EXPECT_NE(reply.body.find("within 0.5 s (the request timeout)"), std::string::npos) << reply.body;
  EXPECT_TRUE(seconds >= 0.45 && seconds <= 2.0) << seconds;
  // A request sent at once is not held to it, nor is the idle time before it.
  const int fd = test::connect_loopback(served.port());
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const std::string health = "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, health.data(), health.size(), 0), static_cast<ssize_t>(health.size()));
  EXPECT_EQ(test::parse_reply(test::read_until_close(fd)).status, 200);
  ::close(fd);
}

TEST(HttpLimits, ASlowBodyGets408AtTheRequestDeadline) {
  ServerOptions options;
  options.limits.request_timeout_ms = 500;
  test::ServedModelFixture served(options);
  const std::string body = R"({"model": "served", "prompt": "hi", "max_tokens": 1})";
  const int fd = test::connect_loopback(served.port());
  const std::string head = "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
                           "\r\nContent-Type: application/json\r\n\r\n" + body.substr(0, 10);
  ASSERT_EQ(::send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  const auto start = Clock::now();
  const HttpReply reply = test::parse_reply(test::read_until_close(fd));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ::close(fd);
  EXPECT_EQ(reply.status, 408) << reply.body;
  EXPECT_TRUE(seconds >= 0.4 && seconds <= 2.0) << seconds;
}

HttpReply health_from(const char* source, uint16_t port) {
  const int fd = test::connect_loopback(port, source);
  const std::string health = "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(::send(fd, health.data(), health.size(), MSG_NOSIGNAL), static_cast<ssize_t>(health.size()));
  const HttpReply reply = test::parse_reply(test::read_until_close(fd));
  ::close(fd);
  return reply;
}

// Over the per-client limit a connection is answered 429 and closed; other addresses (all of 127/8 is loopback on
// Linux) are still served.
TEST(HttpLimits, OneClientCannotTakeEveryConnection) {
  ServerOptions options;
  options.limits.max_client_connections = 3;
  test::ServedModelFixture served(options);
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) held.push_back(test::connect_loopback(served.port(), "127.0.0.1"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted before the next one
  const HttpReply over = health_from("127.0.0.1", served.port());
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_NE(over.body.find("3 connections open (the limit)"), std::string::npos) << over.body;
  EXPECT_EQ(health_from("127.0.0.2", served.port()).status, 200);
  ::close(held.back());
  held.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(health_from("127.0.0.1", served.port()).status, 200);
  for (const int fd : held) ::close(fd);
}

}  // namespace
}  // namespace plumb::server
