#include "support/fixtures.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace plumb::test {

std::string source_dir() {
  const char* env = std::getenv("PLUMB_SOURCE_DIR");
  return env ? env : std::filesystem::current_path().string();
}

std::string fixtures_dir() {
  return source_dir() + "/tests/fixtures";
}

std::string scratch_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("plumb-test-" + std::to_string(::getpid()) + "-" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace plumb::test
