// The HTTP layer against a live server (issue 24): strict framing as RFC 9112 asks, chunked request bodies, bare LF
// line endings, keep-alive and pipelining, and thousands of idle connections that lock nobody out.
#include <fmt/format.h>
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

using test::HttpReply;
using test::send_raw;

const std::string kCompletion = R"({"model": "served", "prompt": "hi", "max_tokens": 1})";

std::string completion_head(const std::string& framing) {
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n" +
         framing;
}

TEST(HttpFraming, ConflictingOrDuplicateContentLengthIsRefused) {
  test::ServedModelFixture served;
  const std::string size = std::to_string(kCompletion.size());
  const std::string length = "Content-Length: " + size + "\r\n";
  for (const std::string& framing : std::vector<std::string>{length + "Content-Length: 3\r\n", length + length,
                                                             "Content-Length: " + size + ", " + size + "\r\n",
                                                             "Content-Length: +" + size + "\r\n"}) {
    const HttpReply r = send_raw(served.port(), completion_head(framing) + "\r\n" + kCompletion);
    EXPECT_EQ(r.status, 400) << framing << r.body;
  }
  EXPECT_EQ(send_raw(served.port(), completion_head(length) + "\r\n" + kCompletion).status, 200);
}

TEST(HttpFraming, ChunkedBodiesAreAccepted) {
  test::ServedModelFixture served;
  // Three chunks, one with an extension, and a trailer field.
  const std::string body = "10;note=x\r\n" + kCompletion.substr(0, 16) + "\r\n" +
                           fmt::format("{:x}\r\n", kCompletion.size() - 20) +
                           kCompletion.substr(16, kCompletion.size() - 20) + "\r\n4\r\n" +
                           kCompletion.substr(kCompletion.size() - 4) + "\r\n0\r\nX-Trailer: 1\r\n\r\n";
  const HttpReply r = send_raw(served.port(), completion_head("Transfer-Encoding: chunked\r\n") + "\r\n" + body);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"text_completion\""), std::string::npos) << r.body;
  // Chunked beside Content-Length is ambiguous framing (request smuggling): 400. Other codings: 501.
  const HttpReply both =
      send_raw(served.port(), completion_head("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") + "\r\n" + body);
  EXPECT_EQ(both.status, 400) << both.body;
  const HttpReply gzip = send_raw(served.port(), completion_head("Transfer-Encoding: gzip\r\n") + "\r\n" + body);
  EXPECT_EQ(gzip.status, 501) << gzip.body;
  const HttpReply bad_size = send_raw(served.port(), completion_head("Transfer-Encoding: chunked\r\n") + "\r\nzz\r\n");
  EXPECT_EQ(bad_size.status, 400) << bad_size.body;
}

TEST(HttpFraming, ChunkedBodiesAreHeldToTheBodyLimit) {
  ServerOptions options;
  options.limits.max_body_bytes = 100;
  test::ServedModelFixture served(options);
  const HttpReply r = send_raw(served.port(), completion_head("Transfer-Encoding: chunked\r\n") + "\r\n40\r\n" +
                                                  std::string(64, ' ') + "\r\n40\r\n" + std::string(64, ' ') + "\r\n");
  EXPECT_EQ(r.status, 413) << r.body;
}

TEST(HttpFraming, BareLineFeedsEndLines) {
  test::ServedModelFixture served;
  EXPECT_EQ(send_raw(served.port(), "GET /health HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n\n").status, 200);
  const HttpReply post = send_raw(served.port(), "POST /v1/completions HTTP/1.1\nConnection: close\nContent-Length: " +
                                                     std::to_string(kCompletion.size()) + "\n\n" + kCompletion);
  EXPECT_EQ(post.status, 200) << post.body;
}

TEST(HttpFraming, MalformedLinesAreRefused) {
  test::ServedModelFixture served;
  for (const std::string& request :
       {std::string("GET /health extra HTTP/1.1\r\nConnection: close\r\n\r\n"),
        std::string("GET /health HTTP/1.1\r\nConnection: close\r\nno colon here\r\n\r\n"),
        std::string("GET /health HTTP/1.1\r\nConnection: close\r\nX-Name : space before the colon\r\n\r\n"),
        std::string("GET /health HTTP/1.1\r\nConnection: close\r\nX-A: 1\r\n folded continuation\r\n\r\n"),
        std::string("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        std::string("GET /health HTTP/1.1\r\nConnection: close\r\nX-A: bare\rCR\r\n\r\n")}) {
    const HttpReply r = send_raw(served.port(), request);
    EXPECT_EQ(r.status, 400) << request << r.body;
  }
  EXPECT_EQ(send_raw(served.port(), "GET /health HTTP/2.0\r\nConnection: close\r\n\r\n").status, 505);
}

TEST(HttpFraming, PipelinedKeepAliveRequestsAreAnsweredInOrder) {
  test::ServedModelFixture served;
  const int fd = test::connect_loopback(served.port());
  const std::string two =
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, two.data(), two.size(), 0), static_cast<ssize_t>(two.size()));
  std::string rest;
  const HttpReply first = test::parse_reply(test::read_until_close(fd), &rest);
  ::close(fd);
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, R"({"status":"ok"})");
  const HttpReply second = test::parse_reply(rest);
  EXPECT_EQ(second.status, 200);
  EXPECT_NE(second.body.find("\"served\""), std::string::npos) << second.body;
}

TEST(HttpFraming, ExpectContinueIsAnsweredBeforeTheBody) {
  test::ServedModelFixture served;
  const int fd = test::connect_loopback(served.port());
  const std::string head =
      completion_head("Expect: 100-continue\r\nContent-Length: " + std::to_string(kCompletion.size()) + "\r\n") +
      "\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  char interim[64] = {};
  ASSERT_GT(::recv(fd, interim, sizeof interim - 1, 0), 0);
  EXPECT_EQ(std::string(interim), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(::send(fd, kCompletion.data(), kCompletion.size(), 0), static_cast<ssize_t>(kCompletion.size()));
  EXPECT_EQ(test::parse_reply(test::read_until_close(fd)).status, 200);
  ::close(fd);
}

// A thread per connection capped at 1,024 answered /health 503 while 1,100 idle connections were open.
TEST(HttpConnections, ThousandsOfIdleConnectionsLockNobodyOut) {
  test::ServedModelFixture served;
  std::vector<int> idle;
  for (int i = 0; i < 1500; ++i) idle.push_back(test::connect_loopback(served.port()));
  for (int i = 0; i < 20; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const HttpReply health = send_raw(served.port(), "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(health.status, 200) << health.body;
    EXPECT_TRUE(ms <= 100.0) << ms << " ms";
  }
  for (const int fd : idle) ::close(fd);
}

TEST(HttpConnections, TheGlobalCapAnswers503) {
  ServerOptions options;
  options.limits.max_connections = 3;
  test::ServedModelFixture served(options);
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(test::connect_loopback(served.port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted before the next one
  const HttpReply over = send_raw(served.port(), "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(over.status, 503) << over.body;
  ::close(idle.back());
  idle.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(send_raw(served.port(), "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n").status, 200);
  for (const int fd : idle) ::close(fd);
}

TEST(HttpConnections, IdleKeepAliveConnectionsAreClosed) {
  ServerOptions options;
  options.limits.idle_timeout_ms = 300;
  test::ServedModelFixture served(options);
  const int fd = test::connect_loopback(served.port());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(test::read_until_close(fd), "");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(s >= 0.25 && s <= 2.0) << s;
  ::close(fd);
}

}  // namespace
}  // namespace plumb::server
