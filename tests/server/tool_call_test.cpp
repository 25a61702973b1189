// Tool calls and reasoning through the whole HTTP path, in process: a scripted runner makes the "model" finish a
// reasoning block the prompt opened and write a <tool_call> block, and the test reads the OpenAI response over a
// loopback socket, streamed and not. (A random-weight model cannot be made to write them; the live-server tests in
// e2e.mjs cover the rest.)
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "engine/engine.h"
#include "http_client.h"
#include "server/server.h"
#include "support/fixtures.h"

namespace plumb::server {
namespace {

// Writes `script` after a prompt of `prompt_length` tokens, whatever the prompt, by putting all the probability on
// the script's next token.
class ScriptedRunner final : public Runner {
 public:
  ScriptedRunner(int64_t vocab, int64_t prompt_length, std::vector<int32_t> script)
      : vocab_(vocab), prompt_length_(prompt_length), script_(std::move(script)) {}
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_context() const override { return 4096; }
  RunnerOutput forward(const std::vector<RunnerEntry>& batch) override {
    RunnerOutput out;
    for (const RunnerEntry& e : batch) {
      out.drawn.push_back(-1);
      if (!e.logits) continue;
      const int64_t produced = e.start + static_cast<int64_t>(e.tokens.size()) - prompt_length_;
      const size_t next = static_cast<size_t>(std::clamp<int64_t>(produced, 0, std::ssize(script_) - 1));
      std::vector<float> row(static_cast<size_t>(vocab_), 0.0f);  // [V]
      row[static_cast<size_t>(script_[next])] = 30.0f;
      out.logits.insert(out.logits.end(), row.begin(), row.end());
    }
    return out;
  }
  void release(int32_t) override {}

 private:
  int64_t vocab_, prompt_length_;
  std::vector<int32_t> script_;
};

using test::HttpReply;
using test::post;

class ToolCalls : public ::testing::Test {
 protected:
  void SetUp() override {
    // models/default's tokenizer with the tiny test chat template, which knows tools and <think> blocks.
    const std::string dir = test::scratch_dir("tool_calls");
    for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      std::filesystem::copy_file(test::source_dir() + "/models/default/" + file, dir + "/" + file);
    std::filesystem::copy_file(test::source_dir() + "/tools/tiny_chat_template.jinja", dir + "/chat_template.jinja");
    text_ = std::make_unique<ModelText>(ModelText::from_dir(dir));
    const std::string prompt = text_->render_chat(messages_, tools_, Json::object());
    const auto prompt_length = static_cast<int64_t>(text_->tokenizer().encode(prompt).size());
    // The tiny template opens "<think>\n" itself when the user's message ends with '?', so the script starts inside
    // the reasoning block, as Qwen3.5 models do.
    ASSERT_TRUE(prompt_opens_reasoning(prompt));
    std::vector<int32_t> script = text_->tokenizer().encode(
        "The user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call>");
    script.push_back(text_->eos_ids().at(0));
    runner_ = std::make_unique<ScriptedRunner>(text_->tokenizer().vocab_size(), prompt_length, script);
    engine_ = std::make_unique<Engine>(*runner_, SchedulerConfig{});
    ServerOptions options;
    options.port = 0;
    options.model_name = "scripted";
    server_ = std::make_unique<Server>(*engine_, *text_, options);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (!server_) return;  // SetUp failed
    server_->stop();
    engine_->stop();
    thread_.join();
  }
  std::string body(bool stream) const {
    return dump_json(Json{{"model", "scripted"}, {"messages", messages_}, {"tools", tools_}, {"stream", stream}});
  }

  const Json messages_ = Json::parse(R"([{"role": "user", "content": "Weather in Paris?"}])");
  const Json tools_ = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
      "required": ["city"]}}}])");
  std::unique_ptr<ModelText> text_;
  std::unique_ptr<ScriptedRunner> runner_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

TEST_F(ToolCalls, ReturnedWholeWithReasoning) {
  const HttpReply reply = post(server_->port(), "/v1/chat/completions", body(false));
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json j = Json::parse(reply.body);
  const Json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["reasoning_content"], "The user wants weather.\n");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()), Json::parse(R"({"city": "Paris"})"));
  EXPECT_GT(j["usage"]["completion_tokens"].get<int64_t>(), 10);
}

TEST_F(ToolCalls, StreamedAsDeltas) {
  const HttpReply reply = post(server_->port(), "/v1/chat/completions", body(true));
  ASSERT_EQ(reply.status, 200) << reply.body;
  std::vector<Json> chunks;
  size_t at = 0;
  bool done = false;
  for (size_t end; (end = reply.body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string event = reply.body.substr(at, end - at);
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    ASSERT_FALSE(done) << "data after [DONE]";
    if (event == "data: [DONE]") {
      done = true;
      continue;
    }
    chunks.push_back(Json::parse(event.substr(6)));
  }
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning;
  Json calls = Json::array();
  for (const Json& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], chunks.front()["id"]);
    const Json& delta = c["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("tool_calls"))
      for (const Json& call : delta["tool_calls"]) calls.push_back(call);
    EXPECT_FALSE(delta.contains("content") && !delta["content"].get<std::string>().empty()) << c.dump();
  }
  EXPECT_EQ(reasoning, "The user wants weather.\n");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

}  // namespace
}  // namespace plumb::server
