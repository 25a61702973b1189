#include "server/generation.h"

#include <ctime>
#include <optional>

#include "core/error.h"
#include "server/output_parser.h"
#include "server/text_stream.h"

namespace plumb::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPollInterval{50};  // how often a waiting handler checks its client

std::string context_message(int64_t context, int64_t prompt, int64_t completion) {
  return fmt::format(
      "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the messages, {} in "
      "the completion). Please reduce the length of the messages or completion.",
      context, prompt + completion, prompt, completion);
}

class GenerationRun {
 public:
  GenerationRun(const ApiRequest& request, const std::vector<int32_t>& prompt, bool opens_reasoning, ServedModel& model,
                HttpExchange& exchange, Clock::time_point received)
      : request_(request),
        prompt_(prompt),
        model_(model),
        exchange_(exchange),
        received_(received),
        opens_reasoning_(opens_reasoning),
        seed_(request.seed_given ? request.sampling.seed : fresh_seed()),
        chat_(request.endpoint == Endpoint::kChatCompletions),
        id_(random_id(chat_ ? "chatcmpl-" : "cmpl-")),
        created_(static_cast<int64_t>(std::time(nullptr))),
        decoder_(model.text.has_tokenizer()
                     ? std::optional<tokenizer::StreamDecoder>(std::in_place, model.text.tokenizer(),
                                                               tokenizer::SpecialTokens::kSkip)
                     : std::nullopt),
        stops_(request.stop),
        parser_(opens_reasoning ? ReasoningStart::kInReasoning : ReasoningStart::kInContent,
                request.parse_tool_calls ? ToolCallParsing::kOn : ToolCallParsing::kOff) {}

  int run();
  GenerationRecord record() const {
    return {static_cast<int64_t>(prompt_.size()), completion_tokens_, static_cast<int64_t>(seed_)};
  }

 private:
  int refuse(int status, const std::string& message, const std::optional<std::string>& code = {}) {
    exchange_.reply(error_response(status, message, code));
    return status;
  }
  Json chunk_base() const;
  Json logprobs_json(const std::vector<GeneratedToken>& tokens);
  Json tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index) const;
  void on_text(const std::string& text);
  void deliver(const OutputDelta& delta);
  void send_event(const Json& event);
  int finish_stream(const std::string& finish_reason);
  int finish_whole(const std::string& finish_reason);
  int fail(int status, const std::string& message);

  const ApiRequest& request_;
  const std::vector<int32_t>& prompt_;
  ServedModel& model_;
  HttpExchange& exchange_;
  Clock::time_point received_;
  bool opens_reasoning_;  // the prompt left the model inside <think>: a constraint starts after it
  uint64_t seed_;
  bool chat_;
  std::string id_;
  int64_t created_;
  std::optional<tokenizer::StreamDecoder> decoder_;  // absent: the model has no tokenizer, so text is ids
  StopMatcher stops_;
  OutputParser parser_;
  bool client_gone_ = false;
  int64_t completion_tokens_ = 0;
  int64_t cached_tokens_ = 0;     // prompt tokens the prefix cache served (the engine reports them once)
  SpeculationStats speculation_;  // the request's speculative decoding, from its last event
  std::optional<Clock::time_point> last_token_;
  std::vector<GeneratedToken> pending_logprobs_;  // tokens whose logprobs are not yet sent (streaming)
  OutputDelta whole_;                             // the answer so far (not streaming)
  std::vector<GeneratedToken> all_logprobs_;      // (not streaming)
  size_t tool_calls_sent_ = 0;
  int64_t text_offset_ = 0;  // characters of completion text that earlier logprobs entries covered
};

Json GenerationRun::chunk_base() const {
  Json j = {{"id", id_},
            {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_.name},
            // Not OpenAI's: the seed the answer was sampled with (as the request's "seed" takes it), to reproduce it.
            {"seed", static_cast<int64_t>(seed_)}};
  return j;
}

Json GenerationRun::logprobs_json(const std::vector<GeneratedToken>& tokens) {
  const ModelText& text = model_.text;
  if (chat_) {
    auto entry = [&](int32_t id, float logprob) {
      const std::string bytes_text = text.token_bytes(id);
      Json bytes = Json::array();
      for (unsigned char c : bytes_text) bytes.push_back(c);
      return Json{{"token", bytes_text}, {"logprob", logprob}, {"bytes", bytes}};
    };
    Json content = Json::array();
    for (const GeneratedToken& t : tokens) {
      Json e = entry(t.id, t.logprob);
      e["top_logprobs"] = Json::array();
      for (const TokenLogprob& alt : t.top) e["top_logprobs"].push_back(entry(alt.id, alt.logprob));
      content.push_back(std::move(e));
    }
    return Json{{"content", content}, {"refusal", nullptr}};
  }
  Json out = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
  for (const GeneratedToken& t : tokens) {
    const std::string bytes_text = text.token_bytes(t.id);
    out["tokens"].push_back(bytes_text);
    out["token_logprobs"].push_back(t.logprob);
    Json top = Json::object();
    for (const TokenLogprob& alt : t.top) top[text.token_bytes(alt.id)] = alt.logprob;
    out["top_logprobs"].push_back(std::move(top));
    // Offsets count characters from the start of the completion: UTF-8 bytes that begin a character.
    out["text_offset"].push_back(text_offset_);
    for (unsigned char c : bytes_text) text_offset_ += (c & 0xc0) != 0x80;
  }
  return out;
}

Json GenerationRun::tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index) const {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json call = Json::object();
    if (request_.stream) call["index"] = first_index + i;  // streamed deltas say which call they extend
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

void GenerationRun::send_event(const Json& event) {
  if (!client_gone_ && !exchange_.write("data: " + dump_json(event) + "\n\n")) client_gone_ = true;
}

void GenerationRun::deliver(const OutputDelta& delta) {
  if (!request_.stream) {
    whole_.content += delta.content;
    whole_.reasoning += delta.reasoning;
    whole_.tool_calls.insert(whole_.tool_calls.end(), delta.tool_calls.begin(), delta.tool_calls.end());
    return;
  }
  if (delta.empty()) return;
  Json choice;
  if (chat_) {
    Json d = Json::object();
    if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty()) d["content"] = delta.content;
    if (!delta.tool_calls.empty()) d["tool_calls"] = tool_calls_json(delta.tool_calls, tool_calls_sent_);
    tool_calls_sent_ += delta.tool_calls.size();
    choice = {{"index", 0}, {"delta", d}};
  } else {
    choice = {{"text", delta.content}, {"index", 0}};
  }
  choice["logprobs"] = request_.top_logprobs >= 0 ? logprobs_json(pending_logprobs_) : Json();
  choice["finish_reason"] = nullptr;
  pending_logprobs_.clear();
  Json event = chunk_base();
  event["choices"] = Json::array({choice});
  if (request_.include_usage) event["usage"] = nullptr;
  send_event(event);
}

void GenerationRun::on_text(const std::string& text) {
  const std::string released = stops_.push(text);
  if (released.empty()) return;
  if (chat_) {
    deliver(parser_.push(released));
  } else {
    deliver(OutputDelta{released, {}, {}});
  }
}

int GenerationRun::fail(int status, const std::string& message) {
  if (!request_.stream) return refuse(status, message);
  send_event(error_json(message, "server_error", std::nullopt));
  exchange_.end_stream();
  return status;
}

// OpenAI's usage object; cached: the prompt tokens the prefix cache served (prompt_tokens_details.cached_tokens).
// A server that decodes speculatively adds how it went: drafts proposed and kept, verifying steps, the share of drafts
// kept, and the tokens a verifying step made on average (its own token and the drafts kept).
Json usage_json(int64_t prompt, int64_t completion, int64_t cached, const SpeculationStats* speculation) {
  Json usage{{"prompt_tokens", prompt},
             {"completion_tokens", completion},
             {"total_tokens", prompt + completion},
             {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  if (speculation) {
    const SpeculationStats& s = *speculation;
    usage["speculative_decoding"] = {
        {"draft_tokens", s.drafted},
        {"accepted_tokens", s.accepted},
        {"verify_steps", s.steps},
        {"acceptance_rate", s.drafted > 0 ? static_cast<double>(s.accepted) / static_cast<double>(s.drafted) : 0.0},
        {"mean_accepted_length",
         s.steps > 0 ? 1.0 + static_cast<double>(s.accepted) / static_cast<double>(s.steps) : 0.0}};
  }
  return usage;
}

int GenerationRun::finish_stream(const std::string& finish_reason) {
  Json choice = chat_ ? Json{{"index", 0}, {"delta", Json::object()}} : Json{{"text", ""}, {"index", 0}};
  choice["logprobs"] =
      request_.top_logprobs >= 0 && !pending_logprobs_.empty() ? logprobs_json(pending_logprobs_) : Json();
  choice["finish_reason"] = finish_reason;
  Json event = chunk_base();
  event["choices"] = Json::array({choice});
  if (request_.include_usage) event["usage"] = nullptr;
  send_event(event);
  if (request_.include_usage) {
    Json usage = chunk_base();
    usage["choices"] = Json::array();
    usage["usage"] = usage_json(static_cast<int64_t>(prompt_.size()), completion_tokens_, cached_tokens_,
                                model_.engine.speculative_tokens() > 0 ? &speculation_ : nullptr);
    send_event(usage);
  }
  if (!client_gone_) exchange_.write("data: [DONE]\n\n");
  exchange_.end_stream();
  return client_gone_ ? kClientClosedRequest : 200;
}

int GenerationRun::finish_whole(const std::string& finish_reason) {
  Json choice;
  if (chat_) {
    Json message = {{"role", "assistant"}};
    const bool tools = !whole_.tool_calls.empty();
    message["content"] = tools && whole_.content.empty() ? Json() : Json(whole_.content);
    message["refusal"] = nullptr;
    if (!whole_.reasoning.empty()) message["reasoning_content"] = whole_.reasoning;
    if (tools) message["tool_calls"] = tool_calls_json(whole_.tool_calls, 0);
    choice = {{"index", 0}, {"message", message}};
  } else {
    choice = {{"text", whole_.content}, {"index", 0}};
  }
  choice["logprobs"] = request_.top_logprobs >= 0 ? logprobs_json(all_logprobs_) : Json();
  choice["finish_reason"] = finish_reason;
  Json body = chunk_base();
  body["object"] = chat_ ? "chat.completion" : "text_completion";
  body["choices"] = Json::array({choice});
  body["usage"] = usage_json(static_cast<int64_t>(prompt_.size()), completion_tokens_, cached_tokens_,
                             model_.engine.speculative_tokens() > 0 ? &speculation_ : nullptr);
  exchange_.reply(HttpResponse{200, "application/json", dump_json(body), {}});
  return 200;
}

int GenerationRun::run() {
  Engine& engine = model_.engine;
  const auto prompt_tokens = static_cast<int64_t>(prompt_.size());
  const int64_t context = engine.max_context();
  if (prompt_tokens >= context)
    return refuse(400, context_message(context, prompt_tokens, request_.max_tokens.value_or(1)),
                  "context_length_exceeded");
  const int64_t max_tokens = request_.max_tokens.value_or(context - prompt_tokens);
  if (prompt_tokens + max_tokens > context)
    return refuse(400, context_message(context, prompt_tokens, max_tokens), "context_length_exceeded");

  EngineRequest er;
  er.prompt = prompt_;
  er.max_tokens = max_tokens;
  er.sampling = request_.sampling;
  er.sampling.seed = seed_;
  er.stop_ids = request_.stop_ids;
  if (!request_.ignore_eos)
    er.stop_ids.insert(er.stop_ids.end(), model_.text.eos_ids().begin(), model_.text.eos_ids().end());
  er.top_logprobs = request_.top_logprobs;
  Submission sub;
  try {
    if (request_.structured) er.constraint = model_.structured.constraint(*request_.structured, opens_reasoning_);
    sub = engine.submit(std::move(er));
  } catch (const Error& e) {
    return refuse(400, e.what());
  }
  switch (sub.status) {
    case SubmitStatus::kQueueFull:
      return refuse(429, "the server's request queue is full; retry later", "rate_limit_exceeded");
    case SubmitStatus::kTooLong:
      return refuse(400, context_message(context, prompt_tokens, max_tokens), "context_length_exceeded");
    case SubmitStatus::kShuttingDown:
      return refuse(503, "the server is shutting down");
    case SubmitStatus::kQueued:
      break;
  }
  model_.metrics.count_tokens(prompt_tokens, 0);

  if (request_.stream) {
    exchange_.begin_stream(200, "text/event-stream");
    if (chat_) {
      Json event = chunk_base();
      event["choices"] = Json::array({{{"index", 0},
                                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}});
      if (request_.include_usage) event["usage"] = nullptr;
      send_event(event);
    }
  }

  std::optional<std::string> finish_reason;
  while (!finish_reason && !client_gone_) {
    const std::vector<EngineEvent> events = sub.stream->wait(kPollInterval);
    // Checked whether or not tokens came: a non-streamed answer writes nothing until the end.
    client_gone_ = client_gone_ || exchange_.client_gone();
    for (const EngineEvent& e : events) {
      if (e.cached_tokens) cached_tokens_ = *e.cached_tokens;
      if (e.token) {
        const Clock::time_point now = Clock::now();
        if (last_token_) {
          model_.metrics.observe_inter_token_latency(std::chrono::duration<double>(now - *last_token_).count());
        } else {
          model_.metrics.observe_time_to_first_token(std::chrono::duration<double>(now - received_).count());
        }
        last_token_ = now;
        ++completion_tokens_;
        model_.metrics.count_tokens(0, 1);
        if (request_.top_logprobs >= 0) (request_.stream ? pending_logprobs_ : all_logprobs_).push_back(*e.token);
        on_text(decoder_ ? decoder_->push(e.token->id) : model_.text.token_bytes(e.token->id));
        if (stops_.stopped()) {
          engine.cancel(sub.id);
          finish_reason = "stop";
          break;
        }
      }
      if (!e.finish) continue;
      speculation_ = e.speculation;
      switch (*e.finish) {
        case StopCause::kStopToken:
          ++completion_tokens_;  // the stop token was generated, though not returned
          finish_reason = "stop";
          break;
        case StopCause::kConstraintDone:
          finish_reason = "stop";
          break;
        case StopCause::kLength:
          finish_reason = "length";
          break;
        case StopCause::kCancelled:
          finish_reason = "stop";
          break;
        case StopCause::kShutdown:
          return fail(503, "the server is shutting down");
        case StopCause::kError:
          return fail(500, "generation failed: " + e.error);
      }
    }
  }
  if (client_gone_) {
    engine.cancel(sub.id);
    exchange_.end_stream();
    return kClientClosedRequest;
  }
  if (!stops_.stopped() && decoder_) on_text(decoder_->flush());
  const std::string rest = stops_.flush();
  if (chat_) {
    OutputDelta tail = parser_.push(rest);
    const OutputDelta end = parser_.finish();
    tail.content += end.content;
    tail.reasoning += end.reasoning;
    tail.tool_calls.insert(tail.tool_calls.end(), end.tool_calls.begin(), end.tool_calls.end());
    deliver(tail);
  } else {
    deliver(OutputDelta{rest, {}, {}});
  }
  if (*finish_reason == "stop" && parser_.tool_calls_seen() > 0) finish_reason = "tool_calls";
  return request_.stream ? finish_stream(*finish_reason) : finish_whole(*finish_reason);
}

}  // namespace

int serve_generation(const ApiRequest& request, const std::vector<int32_t>& prompt, bool prompt_opens_reasoning,
                     ServedModel& model, HttpExchange& exchange, std::chrono::steady_clock::time_point received,
                     GenerationRecord& record) {
  GenerationRun generation(request, prompt, prompt_opens_reasoning, model, exchange, received);
  const int status = generation.run();
  record = generation.record();
  return status;
}

}  // namespace plumb::server
