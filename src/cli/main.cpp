// plumb: the command-line entry point. Subcommands live in cmd_*.cpp; this file only dispatches and reports errors.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"plumb: an exact inference engine for hybrid linear-attention language models"};
  app.require_subcommand(1);
  plumb::cli::register_model_commands(app);
  plumb::cli::register_tokenizer_commands(app);
  plumb::cli::register_serve_commands(app);
  plumb::cli::register_bench_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const plumb::Error& e) {
    std::fprintf(stderr, "plumb: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plumb: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
