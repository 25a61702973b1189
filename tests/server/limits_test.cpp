// Request depth (issue 24): JSON nested past 256 levels anywhere in a request is answered 400 naming the limit, and
// the server stays up. 20,000 nested '[' in these places crashed it with a stack overflow.
#include <gtest/gtest.h>

#include "http_client.h"
#include "served.h"

namespace plumb::server {
namespace {

std::string nested(int levels) {
  return std::string(static_cast<size_t>(levels), '[') + std::string(static_cast<size_t>(levels), ']');
}

// A chat request with `deep` (JSON text) at one of the places the issue found.
std::string chat_with(const std::string& place, const std::string& deep) {
  const std::string user = R"({"role": "user", "content": "hi")";
  if (place == "tools")
    return R"({"model": "served", "messages": [)" + user + R"(}], "tools": [{"type": "function", "function": )" +
           R"({"name": "f", "parameters": {"type": "object", "x": )" + deep + "}}}]}";
  if (place == "chat_template_kwargs")
    return R"({"model": "served", "messages": [)" + user + R"(}], "chat_template_kwargs": {"x": )" + deep + "}}";
  if (place == "message field") return R"({"model": "served", "messages": [)" + user + R"(, "x": )" + deep + "}]}";
  return R"({"model": "served", "messages": [)" + user +
         R"(}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", )" +
         R"("function": {"name": "f", "arguments": {"a": )" + deep + "}}}]}]}";
}

TEST(RequestDepth, DeepRequestsAreRefusedAndTheServerStaysUp) {
  test::ServedModelFixture served;
  for (const char* place : {"tools", "chat_template_kwargs", "message field", "tool_calls arguments"}) {
    const test::HttpReply deep = test::post(served.port(), "/v1/chat/completions", chat_with(place, nested(20000)));
    EXPECT_EQ(deep.status, 400) << place;
    EXPECT_NE(deep.body.find("the request JSON nests deeper than 256 levels (the limit)"), std::string::npos)
        << place << ": " << deep.body;
    // Within the limit the same request is served.
    const test::HttpReply fine = test::post(served.port(), "/v1/chat/completions", chat_with(place, nested(200)));
    EXPECT_EQ(fine.status, 200) << place << ": " << fine.body;
  }
  const test::HttpReply completion =
      test::post(served.port(), "/v1/completions", R"({"model": "served", "prompt": "hi", "x": )" + nested(300) + "}");
  EXPECT_EQ(completion.status, 400) << completion.body;
  EXPECT_EQ(test::send_raw(served.port(), "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n").status, 200);
}

}  // namespace
}  // namespace plumb::server
