#include "cli/suggest.h"

#include <algorithm>

namespace plumb::cli {
namespace {

std::vector<std::string> long_flags(CLI::App& app) {
  std::vector<std::string> flags;
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
  return flags;
}

std::optional<std::string> unknown_flag(CLI::App& command, const std::vector<std::string>& args, size_t first) {
  const std::vector<std::string> flags = long_flags(command);
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") return std::nullopt;  // what follows is positional
    if (arg.rfind("--", 0) != 0) continue;
    // CLI11 takes no "--" word as an option's value, so every one names an option.
    const std::string name = arg.substr(0, arg.find('='));
    if (command.get_option_no_throw(name)) continue;
    const std::optional<std::string> near = closest_match(name, flags);
    if (!near) return std::nullopt;
    const std::string where = command.get_parent() ? command.get_name() + ": " : "";
    return where + "unknown option '" + name + "'; did you mean '" + *near + "'?";
  }
  return std::nullopt;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  // Two edits, or a third of a long word: close enough to be a typo, far enough not to suggest anything for anything.
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    const size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

std::optional<std::string> suggest_correction(CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty()) return std::nullopt;
  const std::string& first = args[0];
  if (first.rfind("-", 0) == 0) return unknown_flag(app, args, 0);
  std::vector<std::string> commands;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == first) return unknown_flag(*sub, args, 1);
    commands.push_back(sub->get_name());
  }
  const std::optional<std::string> near = closest_match(first, commands);
  if (!near) return std::nullopt;
  return "unknown command '" + first + "'; did you mean '" + *near + "'?";
}

}  // namespace plumb::cli
