// libFuzzer target over what a model folder a stranger hands plumb is parsed by before any weight is read: config.json
// (parse_model_config), a .safetensors file's header (CheckpointFiles::open_file, with every tensor of the header
// then read), model.safetensors.index.json (CheckpointFiles::open on a folder that also holds one valid shard,
// shard.safetensors, with tensors "a" and "b"; every tensor the index maps is then read), and ModelOpt's
// hf_quant_config.json (parse_hf_quant_config). The first byte selects the parser; the rest is the file. Bad input must end in a plumb::Error of input kind; a crash, hang, sanitizer report
// or an internal error (PLUMB_INTERNAL_CHECK) is a failure. Built by scripts/fuzz.sh with clang++
// -fsanitize=fuzzer,address,undefined.
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

// The process's temporary folder for the files the loader maps.
const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("plumb-checkpoint-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes `size` bytes to `path` (a failure here is the harness's, not the input's).
void write_file(const std::filesystem::path& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

// A folder whose model.safetensors.index.json is the input, beside a valid shard an index may name.
std::string write_index_folder(const uint8_t* data, size_t size) {
  const std::filesystem::path dir = work_dir() / "model";
  static const bool shard_written = [&] {
    std::filesystem::create_directories(dir);
    const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})";
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    file += header + std::string(16, '\x3f');
    write_file(dir / "shard.safetensors", file.data(), file.size());
    return true;
  }();
  (void)shard_written;
  write_file(dir / "model.safetensors.index.json", data, size);
  return dir.string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0] % 4;
  try {
    if (selector == 0) {
      plumb::parse_model_config(std::string(reinterpret_cast<const char*>(data + 1), size - 1), "config.json");
    } else if (selector == 3) {
      plumb::ModelConfig config;
      plumb::parse_hf_quant_config(std::string(reinterpret_cast<const char*>(data + 1), size - 1),
                                   "hf_quant_config.json", config);
    } else {
      const std::filesystem::path file = work_dir() / "input.safetensors";
      if (selector == 1) write_file(file, data + 1, size - 1);
      const plumb::CheckpointFiles files = selector == 1
                                               ? plumb::CheckpointFiles::open_file(file.string())
                                               : plumb::CheckpointFiles::open(write_index_folder(data + 1, size - 1));
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
