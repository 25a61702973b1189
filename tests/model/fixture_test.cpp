// The CPU forward pass against Hugging Face transformers on the fixture models (tools/make_fixtures.py): every
// reference prefill's logits within 1e-4, the greedy continuation token for token, and the equivalences that must
// hold whatever the reference says (chunked vs recurrent prefill, prefill then decode vs one prefill).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "core/npy.h"
#include "engine/generate.h"
#include "support/fixtures.h"
#include "support/random.h"

namespace plumb {
namespace {

// The CPU path accumulates in FP32 like the FP32 reference; 1e-4 absolute on logits is the bound.
constexpr float kLogitTolerance = 1e-4f;

std::string model_dir(const std::string& name) {
  return test::source_dir() + "/" + name;
}

// The greedy continuations of a reference: one object, or a list of them.
std::vector<nlohmann::json> greedy_cases(const nlohmann::json& ref) {
  const nlohmann::json& greedy = ref["greedy"];
  return greedy.is_array() ? greedy.get<std::vector<nlohmann::json>>() : std::vector<nlohmann::json>{greedy};
}

nlohmann::json read_reference(const std::string& name) {
  const std::string path = model_dir(name) + "/reference/reference.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path;
  return nlohmann::json::parse(in);
}

std::vector<int32_t> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

class Fixture : public ::testing::TestWithParam<const char*> {
 protected:
  CpuBackend backend_;
};

TEST_P(Fixture, PrefillLogitsMatchTransformers) {
  const std::string name = GetParam();
  const nlohmann::json ref = read_reference(name);
  const Qwen3NextModel model = open_model(model_dir(name), backend_);
  ASSERT_FALSE(ref["prefills"].empty());
  for (const auto& prefill : ref["prefills"]) {
    const std::vector<int32_t> ids = ids_of(prefill["ids"]);
    const NpyArray expected = read_npy_f32(model_dir(name) + "/reference/" + prefill["logits"].get<std::string>());
    SequenceState state = model.new_sequence();
    const Tensor logits = model.forward(state, ids, LogitsRows::kAll);
    ASSERT_EQ(logits.shape(), expected.shape) << "T = " << ids.size();
    const float err = test::max_abs_diff(logits.f32(), expected.values.data(), logits.numel());
    EXPECT_TRUE(err <= kLogitTolerance) << name << ", T = " << ids.size() << ": max |diff| " << err;
  }
}

TEST_P(Fixture, GreedyContinuationMatchesTransformers) {
  const std::string name = GetParam();
  const nlohmann::json ref = read_reference(name);
  const Qwen3NextModel model = open_model(model_dir(name), backend_);
  for (const nlohmann::json& greedy : greedy_cases(ref)) {
    const std::vector<int32_t> prompt = ids_of(greedy["prompt"]);
    const std::vector<int32_t> expected = ids_of(greedy["generated"]);
    GenerateOptions options;
    options.max_tokens = static_cast<int64_t>(expected.size());
    EXPECT_EQ(generate(model, prompt, options).tokens, expected) << name;
  }
}

// The chunked and the token-by-token delta rule agree through the whole model, and a prefill split into a prefill
// and single-token decode steps (and into uneven prefill pieces) gives the logits of one full prefill.
TEST_P(Fixture, SplitPrefillAndDecodeMatchOnePrefill) {
  const std::string name = GetParam();
  const nlohmann::json ref = read_reference(name);
  const Qwen3NextModel model = open_model(model_dir(name), backend_);
  std::vector<int32_t> ids;
  for (const auto& prefill : ref["prefills"])
    if (prefill["ids"].size() > ids.size()) ids = ids_of(prefill["ids"]);
  ASSERT_GE(ids.size(), 130u);
  const int64_t T = static_cast<int64_t>(ids.size()), V = model.config().vocab_size;
  SequenceState whole_state = model.new_sequence();
  const Tensor whole = model.forward(whole_state, ids, LogitsRows::kAll);  // [T, V]

  SequenceState recurrent_state = model.new_sequence();
  const Tensor recurrent = model.forward(recurrent_state, ids, LogitsRows::kAll, GdnAlgorithm::kRecurrent);
  EXPECT_TRUE(test::max_abs_diff(whole, recurrent) <= kLogitTolerance) << test::max_abs_diff(whole, recurrent);

  // Pieces: 65 tokens, then 1, then 40, then single-token decode steps to the end.
  SequenceState state = model.new_sequence(8);  // one KV page: the sequence takes more as it grows
  int64_t done = 0;
  auto run = [&](int64_t n) {
    const std::vector<int32_t> piece(ids.begin() + done, ids.begin() + done + n);
    const Tensor logits = model.forward(state, piece, LogitsRows::kAll);
    const float err = test::max_abs_diff(logits.f32(), whole.f32() + done * V, n * V);
    EXPECT_TRUE(err <= kLogitTolerance) << "tokens [" << done << ", " << done + n << "): " << err;
    done += n;
  };
  run(65);
  run(1);
  run(40);
  while (done < T) run(1);
  EXPECT_EQ(state.position, T);
}

INSTANTIATE_TEST_SUITE_P(Models, Fixture, ::testing::ValuesIn(test::kReferenceModels), test::FolderName());

}  // namespace
}  // namespace plumb
