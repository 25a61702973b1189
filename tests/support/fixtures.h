// Where the tests find the repository's fixtures, and a scratch folder per test.
#pragma once

#include <string>

namespace plumb::test {

// The repository root (PLUMB_SOURCE_DIR, set by ctest; else the working directory).
std::string source_dir();
// source_dir() + "/tests/fixtures".
std::string fixtures_dir();
// A fresh, empty folder under the system temp folder, unique to this process and `tag`.
std::string scratch_dir(const std::string& tag);

// A parameterized test's name for a model folder parameter: the folder's last name ("tests/fixtures/models/x" -> x).
struct FolderName {
  template <class ParamInfo>
  std::string operator()(const ParamInfo& info) const {
    const std::string path = info.param;
    return path.substr(path.rfind('/') + 1);
  }
};

}  // namespace plumb::test
