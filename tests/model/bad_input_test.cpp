// Loading refuses a broken model folder with one message naming the file and the tensor or field at fault.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/generate.h"
#include "support/fixtures.h"
#include "support/load_error.h"
#include "support/synthetic_model.h"

namespace plumb {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    config_ = test::small_qwen3_next_config();
    tensors_ = test::synthetic_tensors(config_, 5);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The message of the error loading the folder raises ("(loaded)" if it loads).
  std::string load_error() {
    test::write_model_folder(dir_, config_, tensors_);
    return test::load_error_of(dir_);
  }
  test::NamedTensor& tensor(const std::string& name) {
    for (auto& t : tensors_)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }

  std::string dir_;
  nlohmann::json config_;
  std::vector<test::NamedTensor> tensors_;
};

TEST_F(BadInput, TheUnbrokenFolderLoadsAndRuns) {
  EXPECT_EQ(load_error(), "(loaded)");
  CpuBackend backend;
  const Qwen3NextModel model = open_model(dir_, backend);
  GenerateOptions options;
  options.max_tokens = 3;
  EXPECT_EQ(generate(model, {1, 2, 3}, options).tokens.size(), 3u);
}

TEST_F(BadInput, MissingTensor) {
  const std::string name = "model.layers.1.linear_attn.dt_bias";
  std::erase_if(tensors_, [&](const test::NamedTensor& t) { return t.name == name; });
  EXPECT_THAT(load_error(), AllOf(HasSubstr("missing tensor '" + name + "'"), HasSubstr(dir_)));
}

TEST_F(BadInput, MisshapedTensor) {
  test::NamedTensor& t = tensor("model.layers.2.self_attn.k_proj.weight");
  t = test::make_tensor(t.name, DType::kF32, {7, 16}, std::vector<float>(7 * 16, 0.5f));
  EXPECT_THAT(load_error(), AllOf(HasSubstr("'model.layers.2.self_attn.k_proj.weight'"), HasSubstr("model.safetensors"),
                                  HasSubstr("[7, 16]"), HasSubstr("expected [8, 16]")));
}

TEST_F(BadInput, UnexpectedTensor) {
  tensors_.push_back(test::make_tensor("model.layers.0.linear_attn.extra.weight", DType::kF32, {2}, {1, 2}));
  EXPECT_THAT(load_error(), AllOf(HasSubstr("unexpected tensor 'model.layers.0.linear_attn.extra.weight'"),
                                  HasSubstr("model.safetensors")));
}

TEST_F(BadInput, IgnoredPartsAreAccepted) {
  tensors_.push_back(test::make_tensor("mtp.fc.weight", DType::kF32, {2, 2}, {1, 2, 3, 4}));
  EXPECT_EQ(load_error(), "(loaded)");
}

TEST_F(BadInput, IntegerWeight) {
  test::NamedTensor& t = tensor("model.norm.weight");
  t.dtype = DType::kI32;  // same byte count as F32
  EXPECT_THAT(load_error(), AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("has dtype I32")));
}

TEST_F(BadInput, Fp8WithoutQuantizationConfig) {
  test::NamedTensor& t = tensor("model.layers.0.linear_attn.out_proj.weight");
  t.dtype = DType::kF8E4M3;
  t.bytes.resize(t.bytes.size() / 4);
  EXPECT_THAT(load_error(), AllOf(HasSubstr("out_proj.weight"), HasSubstr("no fp8 quantization_config")));
  config_["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {4, 4}}};
  EXPECT_THAT(load_error(), HasSubstr("has no 'model.layers.0.linear_attn.out_proj.weight_scale_inv'"));
}

TEST_F(BadInput, UnknownModelType) {
  config_["model_type"] = "mamba2";
  EXPECT_THAT(load_error(), AllOf(HasSubstr("config.json"), HasSubstr("model_type 'mamba2' is not supported")));
}

TEST_F(BadInput, MissingConfig) {
  test::write_model_folder(dir_, config_, tensors_);
  std::filesystem::remove(dir_ + "/config.json");
  CpuBackend backend;
  EXPECT_THAT([&] { open_model(dir_, backend); }, ::testing::ThrowsMessage<Error>(HasSubstr(dir_ + "/config.json")));
}

TEST_F(BadInput, TruncatedWeights) {
  test::write_model_folder(dir_, config_, tensors_);
  const std::string file = dir_ + "/model.safetensors";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 100);
  CpuBackend backend;
  EXPECT_THAT([&] { open_model(dir_, backend); }, ::testing::ThrowsMessage<Error>(HasSubstr("model.safetensors")));
}

}  // namespace
}  // namespace plumb
