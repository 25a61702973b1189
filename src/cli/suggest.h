// "Did you mean": for a command line CLI11 refused, the closest subcommand or flag to the word it did not know.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace plumb::cli {

// Edits (insertions, deletions, substitutions) that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word` within a few edits (ties to the first), or none.
std::optional<std::string> closest_match(const std::string& word, const std::vector<std::string>& candidates);

// One error line naming the first unknown subcommand or --flag in `args` (argv without the program name) and the
// closest one `app` knows, e.g. "unknown command 'generat'; did you mean 'generate'?"; none when nothing is close.
std::optional<std::string> suggest_correction(CLI::App& app, const std::vector<std::string>& args);

}  // namespace plumb::cli
