// Tests for sharded checkpoints (model.safetensors.index.json + shards): a consistent index reads every tensor from
// its shard, each shard mapped once; an index that disagrees with its shards, names a missing shard, or points outside
// the folder fails naming both the tensor and the shard.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "loader/safetensors.h"
#include "support/fixtures.h"
#include "support/safetensors_writer.h"

namespace plumb {
namespace {

using test::NamedTensor;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

const std::string kShard1 = "model-00001-of-00003.safetensors";
const std::string kShard2 = "model-00002-of-00003.safetensors";
const std::string kShard3 = "model-00003-of-00003.safetensors";

auto ErrorWith(const std::string& a, const std::string& b) {
  return ThrowsMessage<Error>(AllOf(HasSubstr(a), HasSubstr(b)));
}

class ShardedTest : public ::testing::Test {
 protected:
  ShardedTest() {
    shards_[kShard1] = {test::make_tensor("model.embed_tokens.weight", DType::kBF16, {3, 2}, {1, 2, 3, 4, 5, 6}),
                        test::make_tensor("model.norm.weight", DType::kF32, {2}, {0.5f, -0.25f})};
    shards_[kShard2] = {test::make_tensor("model.layers.0.mlp.gate.weight", DType::kF16, {1, 5}, {1, 2, 4, 8, 16}),
                        NamedTensor{"model.layers.0.step", DType::kI32, {1}, {7, 0, 0, 0}}};
    shards_[kShard3] = {test::make_tensor("lm_head.weight", DType::kF32, {}, {9.0f}),
                        NamedTensor{"model.layers.0.empty", DType::kF32, {0, 4}, {}}};
    for (const auto& [file, tensors] : shards_) {
      test::write_safetensors(path(file), tensors);
      for (const NamedTensor& t : tensors) weight_map_[t.name] = file;
    }
  }

  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  std::string index_path() const { return path("model.safetensors.index.json"); }

  void write_index(const std::string& text) const {
    std::ofstream out(index_path(), std::ios::binary);
    out << text;
  }
  void write_index(const std::map<std::string, std::string>& weight_map) const {
    const nlohmann::json index = {{"metadata", {{"total_size", 123}}}, {"weight_map", weight_map}};
    write_index(index.dump(2));
  }

  std::string dir_ = test::scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::map<std::string, std::vector<NamedTensor>> shards_;
  std::map<std::string, std::string> weight_map_;  // tensor -> shard file
};

TEST_F(ShardedTest, ReadsEveryTensorFromItsShard) {
  write_index(weight_map_);
  const CheckpointFiles files = CheckpointFiles::open(dir_);
  EXPECT_EQ(files.source(), dir_);
  std::vector<std::string> expected_names;
  for (const auto& [name, file] : weight_map_) expected_names.push_back(name);
  EXPECT_EQ(files.names(), expected_names);
  for (const auto& [file, tensors] : shards_) {
    for (const NamedTensor& w : tensors) {
      SCOPED_TRACE(w.name);
      EXPECT_EQ(files.info(w.name).file, path(file));
      EXPECT_EQ(files.info(w.name).dtype, w.dtype);
      const Tensor t = files.tensor(w.name);
      EXPECT_EQ(t.shape(), w.shape);
      const auto* p = static_cast<const unsigned char*>(t.data());
      EXPECT_EQ(std::vector<unsigned char>(p, p + t.nbytes()), w.bytes);
    }
  }
}

TEST_F(ShardedTest, MapsEachShardOnce) {
  write_index(weight_map_);
  const CheckpointFiles files = CheckpointFiles::open(dir_);
  const Tensor embed = files.tensor("model.embed_tokens.weight");
  EXPECT_EQ(embed.owner().get(), files.tensor("model.norm.weight").owner().get());
  EXPECT_NE(embed.owner().get(), files.tensor("model.layers.0.step").owner().get());
  EXPECT_NE(embed.owner().get(), files.tensor("lm_head.weight").owner().get());
}

TEST_F(ShardedTest, IndexTakesPrecedenceOverSingleFile) {
  write_index(weight_map_);
  test::write_safetensors(path("model.safetensors"), {test::make_tensor("other", DType::kF32, {1}, {1.0f})});
  const CheckpointFiles files = CheckpointFiles::open(dir_);
  EXPECT_FALSE(files.contains("other"));
  EXPECT_TRUE(files.contains("lm_head.weight"));
}

TEST_F(ShardedTest, MissingShardFileFails) {
  std::map<std::string, std::string> weight_map = weight_map_;
  weight_map["model.layers.1.extra"] = "model-00004-of-00003.safetensors";
  write_index(weight_map);
  EXPECT_THAT(
      [&] { CheckpointFiles::open(dir_); },
      ThrowsMessage<Error>(AllOf(HasSubstr("'model.layers.1.extra'"),
                                 HasSubstr(path("model-00004-of-00003.safetensors")), HasSubstr("does not exist"))));
}

TEST_F(ShardedTest, TensorListedButAbsentFromShardFails) {
  std::map<std::string, std::string> weight_map = weight_map_;
  weight_map["model.layers.9.ghost"] = kShard2;
  write_index(weight_map);
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); },
              ThrowsMessage<Error>(
                  AllOf(HasSubstr("'model.layers.9.ghost'"), HasSubstr(path(kShard2)), HasSubstr("does not hold it"))));
}

TEST_F(ShardedTest, ShardTensorMissingFromIndexFails) {
  std::map<std::string, std::string> weight_map = weight_map_;
  weight_map.erase("model.norm.weight");
  write_index(weight_map);
  EXPECT_THAT(
      [&] { CheckpointFiles::open(dir_); },
      ThrowsMessage<Error>(AllOf(HasSubstr("'model.norm.weight'"), HasSubstr(path(kShard1)), HasSubstr(index_path()))));
}

TEST_F(ShardedTest, TensorListedForTheWrongShardFails) {
  std::map<std::string, std::string> weight_map = weight_map_;
  weight_map["lm_head.weight"] = kShard2;
  write_index(weight_map);
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); }, ErrorWith("'lm_head.weight'", path(kShard2)));
}

TEST_F(ShardedTest, ShardNameOutsideFolderFails) {
  for (const std::string bad : {"../model-00001-of-00003.safetensors", "sub/model.safetensors", "..", "."}) {
    SCOPED_TRACE(bad);
    std::map<std::string, std::string> weight_map = weight_map_;
    weight_map["model.norm.weight"] = bad;
    write_index(weight_map);
    EXPECT_THAT([&] { CheckpointFiles::open(dir_); },
                ThrowsMessage<Error>(
                    AllOf(HasSubstr(index_path()), HasSubstr("'model.norm.weight'"), HasSubstr("\"" + bad + "\""))));
  }
}

TEST_F(ShardedTest, BrokenShardFailsNamingTheShard) {
  write_index(weight_map_);
  std::filesystem::resize_file(path(kShard3), 12);
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); }, ErrorWith(path(kShard3), "header length"));
}

TEST_F(ShardedTest, MalformedIndexFails) {
  write_index("{\"weight_map\": {");
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); }, ErrorWith(index_path(), "invalid JSON"));
  write_index(R"({"metadata": {}})");
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); }, ErrorWith(index_path(), "weight_map"));
  write_index(R"({"weight_map": ["model-00001-of-00003.safetensors"]})");
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); }, ErrorWith(index_path(), "weight_map"));
  write_index(R"({"weight_map": {"model.norm.weight": 1}})");
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); }, ErrorWith(index_path(), "'model.norm.weight'"));
  write_index(R"({"weight_map": {"model.norm.weight": "a.safetensors", "model.norm.weight": "b.safetensors"}})");
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); }, ErrorWith(index_path(), "\"model.norm.weight\" appears twice"));
  write_index("[]");
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); }, ErrorWith(index_path(), "not a JSON object"));
}

}  // namespace
}  // namespace plumb
