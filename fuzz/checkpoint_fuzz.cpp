// libFuzzer target over what a model folder a stranger hands plumb is parsed by before any weight is read: config.json
// (parse_model_config) and a .safetensors file's header (CheckpointFiles::open_file, with every tensor of the header
// then read). The first byte selects the parser; the rest is the file. Bad input must end in a plumb::Error of input
// kind; a crash, hang, sanitizer report or an internal error (PLUMB_INTERNAL_CHECK) is a failure. Built by
// scripts/fuzz.sh with clang++ -fsanitize=fuzzer,address,undefined.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "loader/safetensors.h"
#include "model/config.h"

namespace {

// The input as a .safetensors file in the temporary folder, for the mapping the loader makes.
std::string write_file(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("plumb-checkpoint-fuzz-" + std::to_string(getpid()) + ".safetensors"))
          .string();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0] % 2;
  try {
    if (selector == 0) {
      plumb::parse_model_config(std::string(reinterpret_cast<const char*>(data + 1), size - 1), "config.json");
    } else {
      const plumb::CheckpointFiles files = plumb::CheckpointFiles::open_file(write_file(data + 1, size - 1));
      for (const std::string& name : files.names()) files.tensor(name);
    }
  } catch (const plumb::Error& e) {
    if (e.kind() == plumb::Error::Kind::kInternal) {
      std::fprintf(stderr, "%s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
