#include "cli/default_model.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace plumb::cli {

std::string model_dir_or_default(const std::string& given, bool quiet) {
  if (!given.empty()) return given;
  const char* env = std::getenv("PLUMB_MODEL");
  const bool from_env = env != nullptr && *env != '\0';
  const std::string dir = from_env ? env : kDefaultModelDir;
  PLUMB_CHECK(std::filesystem::is_directory(dir), "no --model given and {} ({}) is not a folder: pass --model DIR", dir,
              from_env ? "named by PLUMB_MODEL" : "the default, relative to the working directory");
  if (!quiet)
    std::fprintf(stderr, "plumb: no --model given; using %s%s\n", dir.c_str(), from_env ? " (from PLUMB_MODEL)" : "");
  return dir;
}

}  // namespace plumb::cli
