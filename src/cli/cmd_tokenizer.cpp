// plumb tokenize / detokenize / render: the tokenizer and chat template of a model folder, from the command line.
// Output is exactly what the library returns (detokenize adds one newline, as tokenize does, so a shell prompt does
// not run on after the text), so the commands double as a way to diff plumb against Hugging Face.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json_depth.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace plumb::cli {
namespace {

// "1,2, 3" -> {1, 2, 3}; rejects anything that is not a comma-separated list of integers.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t first = item.find_first_not_of(" \t");
    const size_t last = item.find_last_not_of(" \t");
    PLUMB_CHECK(first != std::string::npos, "--ids: empty item in '{}'", text);
    const std::string number = item.substr(first, last - first + 1);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(number, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PLUMB_CHECK(used == number.size() && value >= INT32_MIN && value <= INT32_MAX, "--ids: '{}' is not a token id",
                number);
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

void write(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

struct TokenizeOptions {
  std::string tokenizer, text, file;
};
struct DetokenizeOptions {
  std::string tokenizer, ids;
  bool skip_special = false;
};
struct RenderOptions {
  std::string tokenizer, conversation;
};

}  // namespace

void register_tokenizer_commands(CLI::App& app) {
  auto tokenize = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text, space-separated on one line");
  cmd->add_option("--tokenizer", tokenize->tokenizer, "Folder with tokenizer.json")->required();
  auto* text = cmd->add_option("--text", tokenize->text, "Text to encode");
  auto* file = cmd->add_option("--file", tokenize->file, "File whose bytes to encode");
  text->excludes(file);
  cmd->callback([tokenize, text, file] {
    PLUMB_CHECK(text->count() + file->count() == 1, "tokenize: give exactly one of --text or --file");
    const auto tok = tokenizer::Tokenizer::from_dir(tokenize->tokenizer);
    const std::vector<int32_t> ids = tok.encode(file->count() ? read_regular_file(tokenize->file) : tokenize->text);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    write(line + "\n");
  });

  auto detokenize = std::make_shared<DetokenizeOptions>();
  cmd = app.add_subcommand("detokenize", "Print the text of comma-separated token ids");
  cmd->add_option("--tokenizer", detokenize->tokenizer, "Folder with tokenizer.json")->required();
  cmd->add_option("--ids", detokenize->ids, "Token ids, e.g. 9707,11,1879")->required();
  cmd->add_flag("--skip-special", detokenize->skip_special, "Leave out special tokens");
  cmd->callback([detokenize] {
    const auto tok = tokenizer::Tokenizer::from_dir(detokenize->tokenizer);
    write(tok.decode(parse_ids(detokenize->ids),
                     detokenize->skip_special ? tokenizer::SpecialTokens::kSkip : tokenizer::SpecialTokens::kKeep) +
          "\n");
  });

  auto render = std::make_shared<RenderOptions>();
  cmd = app.add_subcommand("render", "Print the prompt that the chat template makes of a conversation");
  cmd->add_option("--tokenizer", render->tokenizer, "Folder with tokenizer_config.json or chat_template.jinja")
      ->required();
  cmd->add_option("--conversation", render->conversation,
                  "JSON file: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true, ...}")
      ->required();
  cmd->callback([render] {
    const auto tmpl = tokenizer::ChatTemplate::from_dir(render->tokenizer);
    const std::string text = read_regular_file(render->conversation);
    check_json_depth(text, render->conversation);
    const nlohmann::ordered_json kwargs = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    PLUMB_CHECK(!kwargs.is_discarded(), "{}: not valid JSON", render->conversation);
    write(tokenizer::render_chat(tmpl, kwargs));
  });
}

}  // namespace plumb::cli
