#include "cli/chat_session.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "cli/parse.h"
#include "cli/timings.h"
#include "core/error.h"
#include "server/prompt.h"

namespace plumb::cli {

void AnswerPrinter::print(const server::OutputDelta& delta) {
  if (!delta.reasoning.empty()) {
    if (styled_)
      std::fputs(("\x1b[2m" + delta.reasoning + "\x1b[0m").c_str(), stdout);
    else
      std::fputs(delta.reasoning.c_str(), stderr);
    in_reasoning_ = true;
  }
  if (!delta.content.empty()) {
    // The answer starts on a line of its own under the reasoning.
    if (in_reasoning_) std::fputs("\n\n", styled_ ? stdout : stderr);
    in_reasoning_ = false;
    std::fputs(delta.content.c_str(), stdout);
  }
  std::fflush(stdout);
}

void AnswerPrinter::end() {
  if (in_reasoning_ && !styled_) std::fputc('\n', stderr);
  in_reasoning_ = false;
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

ChatSession::ChatSession(const ChatOptions& options, const Qwen3NextModel& model)
    : options_(options),
      model_(model),
      tokenizer_(tokenizer::Tokenizer::from_dir(options.model_dir)),
      template_(tokenizer::ChatTemplate::from_dir(options.model_dir)),
      stop_ids_(default_stop_ids(options.model_dir, model.config())) {}

void ChatSession::reset() {
  messages_ = nlohmann::ordered_json::array();
  last_.reset();
}

nlohmann::ordered_json ChatSession::messages_with(const std::string& user) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system_.empty()) messages.push_back({{"role", "system"}, {"content", system_}});
  for (const auto& m : messages_) messages.push_back(m);
  messages.push_back({{"role", "user"}, {"content", user}});
  return messages;
}

std::vector<int32_t> ChatSession::encode_prompt(const std::string& text) const {
  std::vector<int32_t> ids = tokenizer_.encode(text);
  check_tokenizer_ids(ids, options_.model_dir, model_.config().vocab_size);
  const int64_t context = model_.config().max_position_embeddings;
  PLUMB_CHECK(static_cast<int64_t>(ids.size()) < context,
              "the conversation is {} tokens, which fills the model's context of {} tokens: /reset starts over",
              ids.size(), context);
  return ids;
}

GenerateOptions ChatSession::options_for(int64_t prompt_tokens) const {
  GenerateOptions o;
  o.max_tokens = std::min(options_.max_tokens, model_.config().max_position_embeddings - prompt_tokens);
  o.sampling = options_.sampling;
  o.sampling.seed += turns_;
  o.stop_ids = stop_ids_;
  o.speculative_tokens = options_.speculative_tokens;
  o.draft_vocab = options_.draft_vocab;
  return o;
}

std::optional<ChatSession::ProcessedSequence> ChatSession::reusable_for(const std::vector<int32_t>& prompt) {
  std::optional<ProcessedSequence> last = std::exchange(last_, std::nullopt);
  if (!last || last->ids.size() >= prompt.size() || !std::equal(last->ids.begin(), last->ids.end(), prompt.begin()))
    return std::nullopt;
  return last;
}

void ChatSession::turn(const std::string& user, AnswerPrinter& printer) {
  const nlohmann::ordered_json messages = messages_with(user);
  const std::string text = tokenizer::render_chat(template_, {{"messages", messages}, {"add_generation_prompt", true}});
  const std::vector<int32_t> prompt = encode_prompt(text);
  server::OutputParser parser(
      server::prompt_opens_reasoning(text) ? server::ReasoningStart::kInReasoning : server::ReasoningStart::kInContent,
      server::ToolCallParsing::kOff);
  tokenizer::StreamDecoder decoder(tokenizer_, tokenizer::SpecialTokens::kSkip);
  std::string answer;
  const auto show = [&](const server::OutputDelta& delta) {
    answer += delta.content;
    printer.print(delta);
  };
  std::optional<ProcessedSequence> reused = reusable_for(prompt);
  const int64_t new_tokens = static_cast<int64_t>(prompt.size() - (reused ? reused->ids.size() : 0));
  const GenerateOptions options = options_for(static_cast<int64_t>(prompt.size()));
  GenerationTimer timer;
  const auto on_token = [&](int32_t id) {
    timer.token();
    show(parser.push(decoder.push(id)));
  };
  GenerateResult result = reused ? continue_generation(model_, std::move(reused->state), prompt, options, on_token)
                                 : generate(model_, prompt, options, on_token);
  timer.finished();
  show(parser.push(decoder.flush()));
  show(parser.finish());
  printer.end();

  messages_.push_back(messages.back());
  messages_.push_back({{"role", "assistant"}, {"content", answer}});
  std::vector<int32_t> processed = prompt;
  processed.insert(processed.end(), result.tokens.begin(), result.tokens.end());
  processed.resize(static_cast<size_t>(result.state.position));
  last_ = ProcessedSequence{std::move(result.state), std::move(processed)};
  ++turns_;
  if (!options_.quiet)
    std::fputs(
        (timer.report(new_tokens, static_cast<int64_t>(result.tokens.size()), result.finish == FinishReason::kStop) +
         GenerationTimer::speculation_report(result.speculation))
            .c_str(),
        stderr);
}

}  // namespace plumb::cli
