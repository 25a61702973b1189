// One `plumb chat` conversation with a loaded model: the messages so far, rendered through the model folder's chat
// template each turn, and the model's state after the last turn, re-used when its ids are a prefix of the next
// turn's prompt (a linear-attention state cannot be rolled back, so anything else starts the sequence over).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "server/output_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace plumb::cli {

struct ChatOptions {
  std::string model_dir;
  int64_t max_tokens = 512;        // per answer; fewer where the context ends first
  int64_t speculative_tokens = 0;  // GenerateOptions::speculative_tokens
  int64_t draft_vocab = 0;         // GenerateOptions::draft_vocab
  SamplingParams sampling;         // the seed of turn n is sampling.seed + n, so --seed reproduces a whole chat
  bool quiet = false;              // no timings after each answer
};

// Where an answer goes as it streams: the answer on stdout; the reasoning dimmed beside it when stdout is a terminal,
// else on stderr, so that piped stdout carries answers only.
class AnswerPrinter {
 public:
  explicit AnswerPrinter(bool styled) : styled_(styled) {}
  void print(const server::OutputDelta& delta);
  void end();  // the answer is complete: ends its line

 private:
  bool styled_;
  bool in_reasoning_ = false;  // reasoning was printed and no answer text yet
};

class ChatSession {
 public:
  ChatSession(const ChatOptions& options, const Qwen3NextModel& model);
  // Forgets the conversation (the system prompt stays).
  void reset();
  // Sets the system prompt for the rest of the conversation ("" for none).
  void set_system(std::string text) { system_ = std::move(text); }
  // Answers `user` in the conversation, streaming through `printer`, then prints the timings unless quiet. Throws
  // plumb::Error (the conversation then stays as it was).
  void turn(const std::string& user, AnswerPrinter& printer);

 private:
  struct ProcessedSequence {
    SequenceState state;
    std::vector<int32_t> ids;  // the ids it has processed
  };
  nlohmann::ordered_json messages_with(const std::string& user) const;
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  GenerateOptions options_for(int64_t prompt_tokens) const;
  // The sequence to continue for `prompt`, when the last one processed a prefix of it.
  std::optional<ProcessedSequence> reusable_for(const std::vector<int32_t>& prompt);

  ChatOptions options_;
  const Qwen3NextModel& model_;
  tokenizer::Tokenizer tokenizer_;
  tokenizer::ChatTemplate template_;
  std::vector<int32_t> stop_ids_;
  std::string system_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();  // user and assistant turns
  std::optional<ProcessedSequence> last_;
  uint64_t turns_ = 0;
};

}  // namespace plumb::cli
