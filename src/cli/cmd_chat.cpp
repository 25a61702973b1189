// plumb chat: a multi-turn conversation with a model folder, through its chat template. On a terminal: line editing
// and history on the arrow keys (libedit), answers streamed as they come with the reasoning dimmed, and errors that
// leave the chat going. With stdin not a terminal: plain lines in, answers out, no escapes; an error ends it.
#include <editline/readline.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "cli/chat_session.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/device.h"
#include "cli/load_progress.h"
#include "cli/sampling_options.h"
#include "core/error.h"

namespace plumb::cli {
namespace {

constexpr const char* kCommandsHelp = "/reset starts over, /system TEXT sets the system prompt, /exit (or Ctrl-D) ends";

struct ChatArgs {
  ChatOptions chat;
  std::string system, device = "cpu";
  bool check_weights = false, verbose = false;
};

// The user's lines: through libedit on a terminal, else plain lines from stdin.
class LineReader {
 public:
  explicit LineReader(bool terminal) : terminal_(terminal) {
    if (terminal_) ::using_history();
  }
  std::optional<std::string> next() {
    if (!terminal_) {
      std::string line;
      if (!std::getline(std::cin, line)) return std::nullopt;
      return line;
    }
    char* raw = ::readline("> ");
    if (raw == nullptr) return std::nullopt;
    std::string line(raw);
    std::free(raw);
    if (!line.empty()) ::add_history(line.c_str());
    return line;
  }

 private:
  bool terminal_;
};

void notice(bool quiet, const std::string& text) {
  if (!quiet) std::fprintf(stderr, "plumb: %s\n", text.c_str());
}

enum class Next { kContinue, kExit };

// A chat command (a line starting with '/'); the rest are messages.
Next run_command(const std::string& line, ChatSession& session, bool quiet) {
  if (line == "/exit" || line == "/quit") return Next::kExit;
  if (line == "/reset") {
    session.reset();
    notice(quiet, "the conversation starts over");
  } else if (line == "/system" || line.starts_with("/system ")) {
    const size_t text = line.find_first_not_of(' ', 7);
    session.set_system(text == std::string::npos ? "" : line.substr(text));
    notice(quiet, text == std::string::npos ? "no system prompt" : "system prompt set");
  } else {
    std::fprintf(stderr, "plumb: unknown command %s: %s\n", line.c_str(), kCommandsHelp);
  }
  return Next::kContinue;
}

void run_chat(const ChatArgs& a) {
  const bool terminal = ::isatty(STDIN_FILENO) == 1;
  const auto backend = make_backend(a.device);
  PLUMB_CHECK(a.chat.max_tokens >= 1, "--max-tokens {}: an answer needs at least 1 token", a.chat.max_tokens);
  const Sampler validated(a.chat.sampling);  // its constructor checks the flags before the model loads
  GenerateOptions speculation;
  speculation.max_tokens = 0;
  speculation.speculative_tokens = a.chat.speculative_tokens;
  speculation.draft_vocab = a.chat.draft_vocab;
  check_generation(load_model_config(a.chat.model_dir), 1, speculation);  // the flag, before the model loads
  LoadOptions load;
  load.check_weights = a.check_weights;
  load.mtp = a.chat.speculative_tokens > 0;
  const Qwen3NextModel model = open_model_showing_progress(a.chat.model_dir, *backend, load, a.chat.quiet);
  ChatSession session(a.chat, model);
  session.set_system(a.system);
  if (a.verbose)
    std::fprintf(stderr, "plumb: seed %llu (--seed %llu reproduces this chat)\n",
                 static_cast<unsigned long long>(a.chat.sampling.seed),
                 static_cast<unsigned long long>(a.chat.sampling.seed));
  if (terminal) notice(a.chat.quiet, std::string("chat: ") + kCommandsHelp);
  AnswerPrinter printer(::isatty(STDOUT_FILENO) == 1);
  LineReader reader(terminal);
  while (const std::optional<std::string> line = reader.next()) {
    if (line->find_first_not_of(" \t") == std::string::npos) continue;
    if (line->starts_with('/')) {
      if (run_command(*line, session, a.chat.quiet) == Next::kExit) return;
      continue;
    }
    try {
      session.turn(*line, printer);
    } catch (const Error& e) {
      if (!terminal) throw;
      printer.end();
      std::fprintf(stderr, "plumb: error: %s\n", e.what());
    }
  }
  // Ctrl-D leaves the cursor after the prompt.
  if (terminal) std::fputc('\n', stdout);
}

}  // namespace

void register_chat_commands(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* chat = app.add_subcommand("chat", "Chat with a model in the terminal, through its chat template");
  chat->add_option("--model", args->chat.model_dir, kModelHelp);
  chat->add_option("--system", args->system, "system prompt (/system TEXT changes it during the chat)");
  chat->add_option("--max-tokens", args->chat.max_tokens, "most tokens of one answer");
  chat->add_option("--speculative-tokens", args->chat.speculative_tokens, kSpeculativeTokensHelp);
  chat->add_option("--draft-vocab", args->chat.draft_vocab, kDraftVocabHelp);
  // A chat samples by default, as llama.cpp's does: greedy answers repeat themselves (and small models loop).
  args->chat.sampling.temperature = 0.8f;
  args->chat.sampling.top_p = 0.9f;
  args->chat.sampling.repetition_penalty = 1.1f;
  CLI::Option* seed = add_sampling_options(*chat, args->chat.sampling);
  chat->add_option("--device", args->device, kDeviceHelp);
  chat->add_flag("--check-weights", args->check_weights, kCheckWeightsHelp);
  chat->add_flag("--quiet,-q", args->chat.quiet, "print no notices or timings on stderr");
  chat->add_flag("--verbose,-v", args->verbose, "also print the seed on stderr");
  chat->callback([args, seed] {
    args->chat.model_dir = model_dir_or_default(args->chat.model_dir, args->chat.quiet);
    if (seed->count() == 0) args->chat.sampling.seed = fresh_seed();
    run_chat(*args);
  });
}

}  // namespace plumb::cli
