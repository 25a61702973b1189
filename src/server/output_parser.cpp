#include "server/output_parser.h"

#include <nlohmann/json.hpp>
#include <random>

#include "core/json_depth.h"
#include "server/text_stream.h"

namespace plumb::server {

namespace {

const std::string kThinkOpen = "<think>";
const std::string kThinkClose = "</think>";
const std::string kToolOpen = "<tool_call>";
const std::string kToolClose = "</tool_call>";

}  // namespace

std::string random_id(const std::string& prefix) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof kAlphabet - 1)];
  return id;
}

OutputParser::OutputParser(ReasoningStart start, ToolCallParsing tools)
    : state_(start == ReasoningStart::kInReasoning ? State::kReasoning : State::kContent),
      tools_(tools),
      trim_leading_newlines_(start == ReasoningStart::kInReasoning) {}

void OutputParser::emit(OutputDelta& out, std::string_view text) {
  if (trim_leading_newlines_) {
    while (!text.empty() && (text.front() == '\n' || text.front() == '\r')) text.remove_prefix(1);
    if (text.empty()) return;
    trim_leading_newlines_ = false;
  }
  (state_ == State::kReasoning ? out.reasoning : out.content) += text;
}

void OutputParser::close_tool_call(OutputDelta& out, std::string_view body) {
  // A block nested too deeply to dump safely stays content, like one that is not JSON.
  const nlohmann::json call =
      json_too_deep(body) ? nlohmann::json() : nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  const bool valid = call.is_object() && call.contains("name") && call["name"].is_string() &&
                     (!call.contains("arguments") || call["arguments"].is_object() || call["arguments"].is_string());
  state_ = State::kContent;
  if (!valid) {
    emit(out, kToolOpen + std::string(body) + kToolClose);
    return;
  }
  std::string arguments = "{}";
  if (call.contains("arguments"))
    arguments = call["arguments"].is_string() ? call["arguments"].get<std::string>() : call["arguments"].dump();
  out.tool_calls.push_back(ToolCall{random_id("call_"), call["name"].get<std::string>(), std::move(arguments)});
  ++tool_calls_seen_;
}

OutputDelta OutputParser::push(std::string_view text) {
  held_ += text;
  OutputDelta out;
  for (;;) {
    if (state_ == State::kToolCall) {
      const size_t close = held_.find(kToolClose);
      if (close == std::string::npos) break;  // a tool call is released whole
      const std::string body = held_.substr(0, close);
      held_.erase(0, close + kToolClose.size());
      close_tool_call(out, body);
      trim_leading_newlines_ = true;
      continue;
    }
    std::vector<std::string> tags = {kThinkClose};
    if (state_ == State::kContent) {
      tags = {kThinkOpen};
      if (tools_ == ToolCallParsing::kOn) tags.push_back(kToolOpen);
    }
    size_t at = std::string::npos;
    const std::string* tag = nullptr;
    for (const std::string& t : tags) {
      const size_t p = held_.find(t);
      if (p < at) {
        at = p;
        tag = &t;
      }
    }
    if (!tag) {
      const size_t keep = partial_tag_suffix(held_, tags);
      emit(out, std::string_view(held_).substr(0, held_.size() - keep));
      held_.erase(0, held_.size() - keep);
      break;
    }
    emit(out, std::string_view(held_).substr(0, at));
    held_.erase(0, at + tag->size());
    state_ = *tag == kThinkOpen ? State::kReasoning : *tag == kToolOpen ? State::kToolCall : State::kContent;
    trim_leading_newlines_ = true;
  }
  return out;
}

OutputDelta OutputParser::finish() {
  OutputDelta out;
  if (state_ == State::kToolCall) {
    state_ = State::kContent;
    held_ = kToolOpen + held_;
  }
  emit(out, held_);
  held_.clear();
  return out;
}

}  // namespace plumb::server
