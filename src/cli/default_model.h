// The model folder a subcommand runs when no --model is given: the folder $PLUMB_MODEL names, else the repository's
// models/default (relative to the working directory), as llama.cpp and vLLM users expect one to be found.
#pragma once

#include <string>

namespace plumb::cli {

inline constexpr const char* kDefaultModelDir = "models/default";
inline constexpr const char* kModelHelp = "model folder (default: the folder $PLUMB_MODEL names, else models/default)";

// `given` when not empty; else the default folder, saying on stderr which one is used unless `quiet`. Throws
// plumb::Error when the default folder does not exist.
std::string model_dir_or_default(const std::string& given, bool quiet);

}  // namespace plumb::cli
