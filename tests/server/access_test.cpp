// Browser safety (issue 24): with no API key a foreign Host is refused (DNS rebinding), a POST body that is not JSON
// is refused (cross-site simple requests), --allowed-origins opens CORS for named origins, and --metrics-need-key
// puts /metrics behind the key. Each check runs against a live in-process server over loopback.
#include "server/access.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "http_client.h"
#include "served.h"
#include "server/openai_api.h"

namespace plumb::server {
namespace {

using test::HttpReply;
using test::post;
using test::send_raw;

const std::string kChat = R"({"model": "served", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})";

HttpReply get(uint16_t port, const std::string& path, const std::string& headers) {
  return send_raw(port, "GET " + path + " HTTP/1.1\r\nConnection: close\r\n" + headers + "\r\n");
}

bool has_header(const HttpReply& r, const std::string& line) {
  return r.head.find("\r\n" + line + "\r\n") != std::string::npos;
}

TEST(BrowserSafety, ForeignHostIsRefusedWithoutAKey) {
  test::ServedModelFixture served;
  const std::string port = std::to_string(served.port());
  for (const std::string& host :
       std::vector<std::string>{"127.0.0.1", "127.0.0.1:" + port, "localhost", "LOCALHOST:" + port, "[::1]:" + port})
    EXPECT_EQ(get(served.port(), "/health", "Host: " + host + "\r\n").status, 200) << host;
  for (const std::string& host : std::vector<std::string>{"evil.example", "evil.example:" + port, "127.0.0.1:1",
                                                          "localhost.evil.example", "192.168.1.20:" + port}) {
    const HttpReply r = get(served.port(), "/v1/models", "Host: " + host + "\r\n");
    EXPECT_EQ(r.status, 403) << host;
    EXPECT_NE(r.body.find("host_not_allowed"), std::string::npos) << r.body;
  }
  EXPECT_EQ(get(served.port(), "/health", "Host: evil.example\r\n").status, 403);
}

TEST(BrowserSafety, AnyHostIsServedWithAKey) {
  ServerOptions options;
  options.api_key = "k";
  test::ServedModelFixture served(options);
  EXPECT_EQ(get(served.port(), "/health", "Host: plumb.internal.example\r\n").status, 200);
  EXPECT_EQ(get(served.port(), "/v1/models", "Host: plumb.internal.example\r\nAuthorization: Bearer k\r\n").status,
            200);
}

TEST(BrowserSafety, PostsThatAreNotJsonAreRefused) {
  test::ServedModelFixture served;
  for (const char* type : {"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                           "multipart/form-data; boundary=x"}) {
    const HttpReply r = post(served.port(), "/v1/chat/completions", kChat, "", type);
    EXPECT_EQ(r.status, 415) << type;
    EXPECT_NE(r.body.find("unsupported_media_type"), std::string::npos) << r.body;
  }
  EXPECT_EQ(post(served.port(), "/v1/chat/completions", kChat, "", "application/json; charset=utf-8").status, 200);
  const std::string no_type =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(kChat.size()) + "\r\n\r\n" + kChat;
  EXPECT_EQ(send_raw(served.port(), no_type).status, 200);
}

TEST(BrowserSafety, AllowedOriginsGetCors) {
  ServerOptions options;
  options.allowed_origins = parse_allowed_origins("https://app.example, http://localhost:3000");
  test::ServedModelFixture served(options);
  const std::string preflight =
      "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nOrigin: {}\r\n"
      "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type, authorization\r\n\r\n";
  const HttpReply allowed = send_raw(served.port(), fmt::format(fmt::runtime(preflight), "https://app.example"));
  EXPECT_EQ(allowed.status, 204) << allowed.head;
  EXPECT_TRUE(has_header(allowed, "Access-Control-Allow-Origin: https://app.example")) << allowed.head;
  EXPECT_EQ(allowed.head.find("Access-Control-Allow-Origin"), allowed.head.rfind("Access-Control-Allow-Origin"))
      << "sent twice: " << allowed.head;
  EXPECT_TRUE(has_header(allowed, "Access-Control-Allow-Methods: GET, POST, OPTIONS")) << allowed.head;
  EXPECT_TRUE(has_header(allowed, "Access-Control-Allow-Headers: Authorization, Content-Type")) << allowed.head;
  EXPECT_EQ(allowed.head.find("Content-Length"), std::string::npos) << allowed.head;

  const HttpReply foreign = send_raw(served.port(), fmt::format(fmt::runtime(preflight), "https://evil.example"));
  EXPECT_EQ(foreign.status, 403);
  EXPECT_EQ(foreign.head.find("Access-Control-Allow-Origin"), std::string::npos) << foreign.head;

  // The answers themselves, whole and streamed, carry the origin; a text/plain POST from it is let through.
  const HttpReply whole = post(served.port(), "/v1/chat/completions", kChat, "Origin: http://localhost:3000\r\n");
  EXPECT_EQ(whole.status, 200);
  EXPECT_TRUE(has_header(whole, "Access-Control-Allow-Origin: http://localhost:3000")) << whole.head;
  std::string stream = kChat;
  stream.insert(stream.size() - 1, R"(, "stream": true)");
  const HttpReply streamed = post(served.port(), "/v1/chat/completions", stream, "Origin: https://app.example\r\n");
  EXPECT_EQ(streamed.status, 200);
  EXPECT_TRUE(has_header(streamed, "Access-Control-Allow-Origin: https://app.example")) << streamed.head;
  EXPECT_NE(streamed.body.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(post(served.port(), "/v1/chat/completions", kChat, "Origin: https://app.example\r\n", "text/plain").status,
            200);
  EXPECT_EQ(post(served.port(), "/v1/chat/completions", kChat, "Origin: https://evil.example\r\n", "text/plain").status,
            415);
  const HttpReply other = post(served.port(), "/v1/chat/completions", kChat, "Origin: https://evil.example\r\n");
  EXPECT_EQ(other.head.find("Access-Control-Allow-Origin"), std::string::npos) << other.head;
}

TEST(BrowserSafety, OriginListsAreChecked) {
  EXPECT_EQ(parse_allowed_origins("*"), std::vector<std::string>{"*"});
  EXPECT_TRUE(parse_allowed_origins("").empty());
  EXPECT_THROW(parse_allowed_origins("https://a.example,,https://b.example"), Error);
  EXPECT_THROW(parse_allowed_origins("https://a.example/path"), Error);
  EXPECT_THROW(parse_allowed_origins("a.example"), Error);
}

TEST(BrowserSafety, MetricsNeedTheKeyWhenAsked) {
  ServerOptions options;
  options.api_key = "k";
  {
    test::ServedModelFixture open(options);
    EXPECT_EQ(get(open.port(), "/metrics", "Host: 127.0.0.1\r\n").status, 200);
  }
  options.metrics_need_key = true;
  test::ServedModelFixture guarded(options);
  EXPECT_EQ(get(guarded.port(), "/metrics", "Host: 127.0.0.1\r\n").status, 401);
  EXPECT_EQ(get(guarded.port(), "/metrics", "Host: 127.0.0.1\r\nAuthorization: Bearer nope\r\n").status, 401);
  EXPECT_EQ(get(guarded.port(), "/metrics", "Host: 127.0.0.1\r\nAuthorization: Bearer k\r\n").status, 200);
  EXPECT_EQ(get(guarded.port(), "/health", "Host: 127.0.0.1\r\n").status, 200);
}

}  // namespace
}  // namespace plumb::server
