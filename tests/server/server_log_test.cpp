// The server's request fields new users expect (model optional, the seed's origin) and its log lines: logfmt that log
// tools split back into the same fields, and JSON lines.
#include "server/server_log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "core/error.h"
#include "server/openai_api.h"

namespace plumb::server {
namespace {

Json chat(const std::string& extra) {
  return Json::parse(R"({"messages": [{"role": "user", "content": "hi"})" + extra + "]}");
}

TEST(Request, ModelIsOptionalAndASeedIsMarkedGiven) {
  const ApiRequest no_model = parse_api_request(Endpoint::kChatCompletions, chat(""));
  EXPECT_FALSE(no_model.model.has_value());
  EXPECT_FALSE(no_model.seed_given);
  Json body = chat("");
  body["model"] = "m";
  body["seed"] = -3;
  const ApiRequest seeded = parse_api_request(Endpoint::kChatCompletions, body);
  EXPECT_EQ(seeded.model, "m");
  EXPECT_TRUE(seeded.seed_given);
  EXPECT_EQ(static_cast<int64_t>(seeded.sampling.seed), -3);
}

// A minimal logfmt reader, as log tools split a line: key=value pairs, values bare or quoted with \" and \\ escapes.
std::map<std::string, std::string> split_logfmt(const std::string& line) {
  std::map<std::string, std::string> fields;
  size_t i = 0;
  while (i < line.size() && line[i] != '\n') {
    const size_t eq = line.find('=', i);
    const std::string key = line.substr(i, eq - i);
    std::string value;
    i = eq + 1;
    if (line[i] == '"') {
      for (++i; line[i] != '"'; ++i) {
        if (line[i] == '\\') ++i;
        value += line[i];
      }
      ++i;
    } else {
      while (line[i] != ' ' && line[i] != '\n') value += line[i++];
    }
    fields[key] = value;
    if (line[i] == ' ') ++i;
  }
  return fields;
}

TEST(ServerLog, LogfmtQuotesWhatWouldSplitAndJsonIsOneObject) {
  const std::vector<LogField> fields = {{"event", "request", false},
                                        {"path", "/v1/a b=\"c\"\\", false},
                                        {"empty", "", false},
                                        {"status", "200", true},
                                        {"latency_ms", "12.50", true}};
  const std::string line = format_log_line(LogFormat::kLogfmt, fields);
  EXPECT_EQ(line, "event=request path=\"/v1/a b=\\\"c\\\"\\\\\" empty=\"\" status=200 latency_ms=12.50\n");
  const std::map<std::string, std::string> back = split_logfmt(line);
  EXPECT_EQ(back.at("path"), "/v1/a b=\"c\"\\");
  EXPECT_EQ(back.at("status"), "200");
  EXPECT_EQ(back.at("empty"), "");
  const std::string json = format_log_line(LogFormat::kJson, fields);
  ASSERT_EQ(json.back(), '\n');
  const Json j = Json::parse(json);
  EXPECT_EQ(j.at("path"), "/v1/a b=\"c\"\\");
  EXPECT_EQ(j.at("status"), 200);
  EXPECT_TRUE(j.at("latency_ms") == 12.5);
  EXPECT_EQ(parse_log_format("json"), LogFormat::kJson);
  EXPECT_EQ(parse_log_format("text"), LogFormat::kLogfmt);
  EXPECT_THROW(parse_log_format("xml"), Error);
}

}  // namespace
}  // namespace plumb::server
