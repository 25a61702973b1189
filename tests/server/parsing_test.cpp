// The server's text handling without a network: the reasoning/tool-call parser and stop strings (streamed in every
// possible split), request validation, and the metrics text.
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/output_parser.h"
#include "server/text_stream.h"

namespace plumb::server {
namespace {

// Feeds `text` in pieces of `piece` bytes and joins what comes out.
OutputDelta parse_in_pieces(const std::string& text, size_t piece, ReasoningStart start) {
  OutputParser parser(start, ToolCallParsing::kOn);
  OutputDelta all;
  auto add = [&](const OutputDelta& d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    all.tool_calls.insert(all.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  };
  for (size_t i = 0; i < text.size(); i += piece) add(parser.push(text.substr(i, piece)));
  add(parser.finish());
  return all;
}

TEST(OutputParser, SplitsReasoningContentAndToolCallsWhateverThePieces) {
  const std::string text =
      "<think>\nweigh it\n</think>\n\nCalling.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"noop\"}\n</tool_call>";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    SCOPED_TRACE("pieces of " + std::to_string(piece));
    const OutputDelta d = parse_in_pieces(text, piece, ReasoningStart::kInContent);
    EXPECT_EQ(d.reasoning, "weigh it\n");
    EXPECT_EQ(d.content, "Calling.\n");
    ASSERT_EQ(d.tool_calls.size(), 2u);
    EXPECT_EQ(d.tool_calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(d.tool_calls[0].arguments), nlohmann::json::parse(R"({"city":"Paris","days":2})"));
    EXPECT_EQ(d.tool_calls[1].name, "noop");
    EXPECT_EQ(d.tool_calls[1].arguments, "{}");
    EXPECT_EQ(d.tool_calls[0].id.rfind("call_", 0), 0u);
    EXPECT_NE(d.tool_calls[0].id, d.tool_calls[1].id);
  }
}

TEST(OutputParser, APromptThatOpenedThinkStartsInReasoning) {
  const OutputDelta d = parse_in_pieces("\nhmm</think>\n\nyes", 3, ReasoningStart::kInReasoning);
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "yes");
  EXPECT_TRUE(d.tool_calls.empty());
  // An unfinished reasoning block stays reasoning.
  EXPECT_EQ(parse_in_pieces("<think>still going", 2, ReasoningStart::kInContent).reasoning, "still going");
}

TEST(OutputParser, InvalidOrUnclosedToolCallsStayContent) {
  const OutputDelta bad = parse_in_pieces("a<tool_call>{not json}</tool_call>b", 4, ReasoningStart::kInContent);
  EXPECT_EQ(bad.content, "a<tool_call>{not json}</tool_call>b");
  EXPECT_TRUE(bad.tool_calls.empty());
  const OutputDelta open = parse_in_pieces("x<tool_call>{\"name\": \"f\"", 5, ReasoningStart::kInContent);
  EXPECT_EQ(open.content, "x<tool_call>{\"name\": \"f\"");
  // Without tools the tags are plain text.
  OutputParser plain(ReasoningStart::kInContent, ToolCallParsing::kOff);
  EXPECT_EQ(plain.push("<tool_call>{\"name\": \"f\"}</tool_call>").content, "<tool_call>{\"name\": \"f\"}</tool_call>");
}

TEST(StopMatcher, StopsAtTheFirstStopStringAcrossPieces) {
  const std::string text = "one two STOP three END";
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    StopMatcher m({"END", "STOP"});
    std::string out;
    for (size_t i = 0; i < text.size(); i += piece) out += m.push(text.substr(i, piece));
    out += m.flush();
    EXPECT_EQ(out, "one two ") << "pieces of " << piece;
    EXPECT_TRUE(m.stopped());
  }
  StopMatcher held({"abc"});
  EXPECT_EQ(held.push("xxab"), "xx");  // "ab" may start "abc"
  EXPECT_EQ(held.flush(), "ab");
  EXPECT_FALSE(held.stopped());
}

Json chat_body() {
  return Json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
}

TEST(ApiRequest, ParsesFieldsAndDefaults) {
  Json body = chat_body();
  body["max_tokens"] = 5;
  body["max_completion_tokens"] = 7;
  body["top_k"] = -1;
  body["stop"] = Json::array({"x", 3});
  body["stop_token_ids"] = Json::array({4});
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  body["messages"][0]["content"] = Json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}});
  const ApiRequest r = parse_api_request(Endpoint::kChatCompletions, body);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.stop_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.messages[0]["content"], "ab");
  EXPECT_FALSE(r.parse_tool_calls);

  const ApiRequest c = parse_api_request(Endpoint::kCompletions, Json::parse(R"({"model": "m", "prompt": [[5, 6]],
                                                                                 "logprobs": 3})"));
  EXPECT_TRUE(c.prompt_is_ids);
  EXPECT_EQ(c.prompt_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(c.top_logprobs, 3);
  EXPECT_FALSE(c.max_tokens.has_value());
}

TEST(ApiRequest, RefusesWrongTypesRangesAndUnsupportedFields) {
  const std::vector<std::pair<const char*, Json>> bad = {
      {"temperature", "hot"},
      {"temperature", 2.5},
      {"top_p", 0},
      {"top_p", 1.5},
      {"n", 2},
      {"max_tokens", 0},
      {"max_tokens", 1.5},
      {"presence_penalty", -3},
      {"stop", 5.5},
      {"stream_options", {{"include_usage", true}}},
      {"tool_choice", "required"},
      {"top_logprobs", 3},
      {"logit_bias", {{"5", 10}}},
      {"seed", "x"},
      {"messages", Json::array()},
      {"model", 7},
      {"tools", {{"type", "function"}}},
      // A "type" that is not a string (request_fuzz found these thrown as JSON type errors, not refused).
      {"tools", Json::array({{{"type", {{"name", "get"}}}, {"function", {{"name", "get"}}}}})},
      {"tool_choice", {{"type", 5}, {"function", {{"name", "get"}}}}},
      {"messages", Json::array({{{"role", "user"}, {"content", Json::array({{{"type", {1}}, {"text", "hi"}}})}}})},
  };
  for (const auto& [name, value] : bad) {
    Json body = chat_body();
    body[name] = value;
    EXPECT_THROW(parse_api_request(Endpoint::kChatCompletions, body), Error) << name << " = " << value.dump();
  }
  EXPECT_THROW(parse_api_request(Endpoint::kCompletions, Json::parse(R"({"model": "m", "prompt": ""})")), Error);
  EXPECT_THROW(parse_api_request(Endpoint::kCompletions, Json::parse(R"({"model": "m", "prompt": ["a", "b"]})")),
               Error);
  EXPECT_THROW(parse_api_request(Endpoint::kCompletions, Json::parse(R"({"model": "m", "prompt": [-1]})")), Error);
}

TEST(Metrics, RendersCountersGaugesAndCumulativeHistograms) {
  Metrics m;
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 429);
  m.count_tokens(10, 3);
  m.observe_time_to_first_token(0.02);
  m.observe_time_to_first_token(3.0);
  EngineStats stats;
  stats.running = 4;
  stats.kv_pages_used = 12;
  const std::string text = m.render(stats);
  for (const char* line :
       {"plumb_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n",
        "plumb_requests_total{endpoint=\"/v1/completions\",status=\"429\"} 1\n", "plumb_prompt_tokens_total 10\n",
        "plumb_generation_tokens_total 3\n", "plumb_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n",
        "plumb_time_to_first_token_seconds_bucket{le=\"5\"} 2\n", "plumb_time_to_first_token_seconds_count 2\n",
        "plumb_running_batch_size 4\n", "plumb_kv_pages_used 12\n",
        "# TYPE plumb_inter_token_latency_seconds histogram\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
}

}  // namespace
}  // namespace plumb::server
