// The plumb executable's subcommands. Each register_* function adds its subcommands to the app; the callbacks
// throw plumb::Error on bad input, which main() prints as one line before exiting non-zero.
#pragma once

#include <CLI/CLI.hpp>

namespace plumb::cli {

void register_model_commands(CLI::App& app);      // logits, generate, inspect
void register_chat_commands(CLI::App& app);       // chat
void register_tokenizer_commands(CLI::App& app);  // tokenize, detokenize, render
void register_serve_commands(CLI::App& app);      // serve
void register_bench_commands(CLI::App& app);      // bench

}  // namespace plumb::cli
