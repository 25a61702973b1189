// plumb: the command-line entry point. Subcommands live in cmd_*.cpp; this file only dispatches and reports errors.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "cli/suggest.h"
#include "cli/version.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"plumb: an exact inference engine for hybrid linear-attention language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return plumb::cli::version_report(); });
  // Subcommands copy their parent's option defaults when made, so every option of every --help shows its default.
  app.option_defaults()->always_capture_default();
  plumb::cli::register_model_commands(app);
  plumb::cli::register_chat_commands(app);
  plumb::cli::register_tokenizer_commands(app);
  plumb::cli::register_serve_commands(app);
  plumb::cli::register_bench_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != static_cast<int>(CLI::ExitCodes::Success)) {
      if (const auto hint = plumb::cli::suggest_correction(app, std::vector<std::string>(argv + 1, argv + argc))) {
        std::fprintf(stderr, "plumb: error: %s\n", hint->c_str());
        return e.get_exit_code();
      }
    }
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
