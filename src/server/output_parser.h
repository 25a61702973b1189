// Splits a chat model's streamed output into content, reasoning and tool calls, as Qwen3 writes them:
// `<think>reasoning</think>` (or, when the prompt already opened the block, `reasoning</think>`) and
// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks. Text is released as soon as it cannot be part
// of a tag; a tool call is released whole once its closing tag arrives. A block that is not valid JSON stays content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace plumb::server {

struct ToolCall {
  std::string id;  // "call_" + 24 random characters
  std::string name;
  std::string arguments;  // JSON text of the arguments object
};

struct OutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
};

enum class ReasoningStart { kInContent, kInReasoning };  // kInReasoning: the prompt ended inside <think>
enum class ToolCallParsing { kOff, kOn };

class OutputParser {
 public:
  OutputParser(ReasoningStart start, ToolCallParsing tools);
  OutputDelta push(std::string_view text);
  // The rest at the end of the output: an unclosed reasoning block stays reasoning, an unclosed tool call content.
  OutputDelta finish();
  int tool_calls_seen() const { return tool_calls_seen_; }

 private:
  enum class State { kContent, kReasoning, kToolCall };
  void emit(OutputDelta& out, std::string_view text);
  void close_tool_call(OutputDelta& out, std::string_view body);

  State state_;
  ToolCallParsing tools_;
  std::string held_;
  bool trim_leading_newlines_ = false;  // right after a tag, the newlines Qwen writes around blocks are dropped
  int tool_calls_seen_ = 0;
};

// `prefix` followed by 24 random letters and digits (ids of completions and tool calls).
std::string random_id(const std::string& prefix);

}  // namespace plumb::server
