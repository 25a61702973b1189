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

// Model folders with references made by transformers, relative to the repository root; a missing one fails its
// tests. The fixtures come from tools/make_fixtures.py, the default model from tools/train_demo_model.py.
inline constexpr const char* kReferenceModels[] = {
    "tests/fixtures/models/qwen3_next_moe",
    "tests/fixtures/models/qwen3_next_tied",
    "tests/fixtures/models/qwen3_5_dense",
    "tests/fixtures/models/qwen3_5_moe",
    "tests/fixtures/models/qwen3_next_moe_sharded",
    "tests/fixtures/models/qwen3_5_moe_other_layout",
    "tests/fixtures/models/qwen3_5_moe_wrapped",
    "tests/fixtures/models/qwen3_next_bf16",
    "tests/fixtures/models/qwen3_next_fp16",
    "tests/fixtures/models/qwen3_next_fp8",
    "tests/fixtures/models/qwen3_next_nvfp4",
    "tests/fixtures/models/qwen3_next_chat",
    "models/default",
};

// A parameterized test's name for a model folder parameter: the folder's last name ("tests/fixtures/models/x" -> x).
struct FolderName {
  template <class ParamInfo>
  std::string operator()(const ParamInfo& info) const {
    const std::string path = info.param;
    return path.substr(path.rfind('/') + 1);
  }
};

}  // namespace plumb::test
