// LoadOptions::on_progress: after every tensor, the bytes read so far against the total, the shard it came from, and
// each shard's last tensor marked, so a caller can draw a bar or print a line per shard.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "loader/load_model.h"
#include "support/fixtures.h"
#include "support/synthetic_model.h"

namespace plumb {
namespace {

TEST(LoadProgress, CountsEveryByteOfEveryShardAndMarksEachShardsEnd) {
  const std::string dir = test::scratch_dir("load-progress");
  const nlohmann::json config = test::small_qwen3_next_config();
  const std::vector<test::NamedTensor> tensors = test::synthetic_tensors(config, 3);
  test::write_model_folder(dir, config, tensors);
  std::filesystem::remove(dir + "/model.safetensors");
  // Two shards, split in the middle of the tensor list.
  const size_t half = tensors.size() / 2;
  const std::vector<std::string> files = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  test::write_safetensors(dir + "/" + files[0], {tensors.begin(), tensors.begin() + half});
  test::write_safetensors(dir + "/" + files[1], {tensors.begin() + half, tensors.end()});
  nlohmann::json weight_map;
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    weight_map[tensors[i].name] = files[i < half ? 0 : 1];
    total += static_cast<int64_t>(tensors[i].bytes.size());
  }
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();

  std::vector<LoadProgress> seen;
  LoadOptions options;
  options.on_progress = [&](const LoadProgress& p) { seen.push_back(p); };
  CpuBackend backend;
  load_model(dir, backend, options);

  ASSERT_EQ(seen.size(), tensors.size());  // one call per tensor (none of this model's are FP8 scales)
  std::map<std::string, int> shard_ends;
  int64_t previous = 0;
  for (const LoadProgress& p : seen) {
    EXPECT_EQ(p.shards, 2);
    EXPECT_EQ(p.bytes_total, total);
    EXPECT_GT(p.bytes_done, previous);
    previous = p.bytes_done;
    EXPECT_EQ(p.shard, p.file == dir + "/" + files[0] ? 1 : 2) << p.file;
    if (p.shard_done) ++shard_ends[std::filesystem::path(p.file).filename().string()];
  }
  EXPECT_EQ(seen.back().bytes_done, total);
  EXPECT_EQ(shard_ends, (std::map<std::string, int>{{files[0], 1}, {files[1], 1}}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb
