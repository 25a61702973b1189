// Speculative decoding on the CPU: whatever the drafts, the tokens and the final state are plain decoding's, bit for
// bit, greedy and sampled, on every fixture and the demo model; and the multi-token-prediction head loads from
// checkpoint names, takes its inputs in the published order, and drafts the same bits in one call or row by row.
#include "engine/speculative.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "engine/generate.h"
#include "model/state_hash.h"
#include "model/weight_table.h"
#include "support/fixtures.h"
#include "support/refusals.h"
#include "support/speculation_check.h"
#include "support/synthetic_model.h"
#include "support/tensors.h"

namespace plumb {
namespace {

using ::testing::HasSubstr;

class SpeculativeDecoding : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { model_.emplace(open_model(test::source_dir() + "/" + GetParam(), backend_)); }
  void expect_speculation_is_invisible(const GenerateOptions& plain, const std::vector<int32_t>& prompt) {
    for (const std::string& m : test::speculation_mismatches(*model_, plain, prompt)) ADD_FAILURE() << m;
  }

  CpuBackend backend_;
  std::optional<Qwen3NextModel> model_;
};

TEST_P(SpeculativeDecoding, GreedyTokensAndStateAreDecodings) {
  GenerateOptions options;
  options.max_tokens = 20;
  expect_speculation_is_invisible(options, test::random_ids(11, 7, model_->config().vocab_size));
}

TEST_P(SpeculativeDecoding, SampledTokensAndStateAreDecodings) {
  GenerateOptions options;
  options.max_tokens = 20;
  options.sampling.temperature = 0.9f;
  options.sampling.top_p = 0.95f;
  options.sampling.presence_penalty = 0.5f;
  options.sampling.seed = 7;
  expect_speculation_is_invisible(options, test::random_ids(12, 9, model_->config().vocab_size));
}

TEST_P(SpeculativeDecoding, AStopTokenInsideAStepEndsItWhereDecodingEnds) {
  const std::vector<int32_t> prompt = test::random_ids(13, 5, model_->config().vocab_size);
  GenerateOptions options;
  options.max_tokens = 20;
  const std::vector<int32_t> tokens = generate(*model_, prompt, options).tokens;
  // The first token whose first appearance comes after a few others: generation stops there.
  for (size_t i = 3; i < tokens.size(); ++i) {
    if (std::find(tokens.begin(), tokens.begin() + static_cast<int64_t>(i), tokens[i]) !=
        tokens.begin() + static_cast<int64_t>(i))
      continue;
    options.stop_ids = {tokens[i]};
    expect_speculation_is_invisible(options, prompt);
    return;
  }
  GTEST_SKIP() << GetParam() << ": its greedy continuation repeats a few tokens only";
}

// Every fixture model and the demo model.
INSTANTIATE_TEST_SUITE_P(Models, SpeculativeDecoding, ::testing::ValuesIn(test::kReferenceModels), test::FolderName());

// The demo model's head is trained (tools/train_demo_mtp.py): on the greedy continuations of the reference prompts it
// drafts what the model then draws more than half the time (196 of 350 drafts at 3 a step when it was trained), where
// a random head over 4096 ids would almost never. The tokens stay transformers' greedy reference continuations.
TEST(DemoModelHead, DraftsWhatGreedyDecodingDrawsOften) {
  CpuBackend backend;
  LoadOptions load;
  load.mtp = true;
  const std::string dir = test::source_dir() + "/models/default";
  const Qwen3NextModel model = open_model(dir, backend, load);
  ASSERT_TRUE(model.has_mtp());
  std::ifstream file(dir + "/reference/reference.json");
  const nlohmann::json reference = nlohmann::json::parse(file);
  int64_t drafted = 0, accepted = 0;
  for (const nlohmann::json& greedy : reference["greedy"]) {
    const auto want = greedy["generated"].get<std::vector<int32_t>>();
    GenerateOptions options;
    options.max_tokens = static_cast<int64_t>(want.size());
    options.speculative_tokens = 3;
    const GenerateResult got = generate(model, greedy["prompt"].get<std::vector<int32_t>>(), options);
    EXPECT_EQ(got.tokens, want);
    drafted += got.speculation.drafted;
    accepted += got.speculation.accepted;
  }
  // At least 30 %: room for a head retrained by the same recipe (its top-1 on the validation text was 0.33, and the
  // model's own loops are easier), far above the 0.1 % a random head keeps.
  EXPECT_GE(accepted * 10, drafted * 3) << accepted << " of " << drafted << " drafts kept";
}

// Model folders with an MTP head (random weights) for the head's own tests.
class MtpHead : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A small Qwen3-Next (MoE with a shared expert) or dense Qwen3.5 config with one MTP layer.
  static nlohmann::json config_with_head(bool dense) { return test::small_config_with_mtp(256, dense); }
  Qwen3NextModel open(const nlohmann::json& config, const std::vector<test::NamedTensor>& tensors, bool mtp = true) {
    test::write_model_folder(dir_, config, tensors);
    LoadOptions options;
    options.mtp = mtp;
    return open_model(dir_, backend_, options);
  }
  // Hidden states [T, H] of standard normal values, as a main model's final norm gives them roughly.
  static Tensor random_hidden(int64_t T, int64_t H, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    Tensor hidden = Tensor::zeros(DType::kF32, {T, H});
    for (int64_t i = 0; i < T * H; ++i) hidden.f32()[i] = dist(rng);
    return hidden;
  }
  static test::NamedTensor& tensor(std::vector<test::NamedTensor>& tensors, const std::string& name) {
    for (test::NamedTensor& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }

  std::string dir_;
  CpuBackend backend_;
};

TEST_F(MtpHead, DraftingWithItLeavesGreedyAndSampledTokensAsTheyAre) {
  for (bool dense : {false, true}) {
    const nlohmann::json config = config_with_head(dense);
    const Qwen3NextModel model = open(config, test::synthetic_tensors(config, 21));
    ASSERT_TRUE(model.has_mtp());
    for (float temperature : {0.0f, 0.8f}) {
      GenerateOptions plain;
      plain.max_tokens = 40;
      plain.sampling.temperature = temperature;
      plain.sampling.seed = 3;
      const std::vector<int32_t> prompt = test::random_ids(5, 70, model.config().vocab_size);  // past one KV page
      const GenerateResult want = generate(model, prompt, plain);
      for (int64_t k : {1, 2, 4, 8}) {
        GenerateOptions options = plain;
        options.speculative_tokens = k;
        const GenerateResult got = generate(model, prompt, options);
        const std::string where = (dense ? "dense" : "moe") + std::string(", temperature ") +
                                  std::to_string(temperature) + ", k " + std::to_string(k);
        EXPECT_EQ(got.tokens, want.tokens) << where;
        EXPECT_EQ(got.state.position, want.state.position) << where;
        EXPECT_EQ(state_hashes(model, got.state), state_hashes(model, want.state)) << where;
        EXPECT_GT(got.speculation.drafted, 0) << where;
        EXPECT_EQ(got.state.draft_position, got.state.position) << where << ": the head's cache keeps up";
      }
    }
  }
}

// A conversation's next turn goes on from the state the last turn left: drafting resumes where the head's cache
// ends; a state from a plain run has no head cache, so it decodes without drafts. The tokens are the same every way.
TEST_F(MtpHead, ANextTurnDraftsOnlyWhereTheHeadsCacheCameAlong) {
  const nlohmann::json config = config_with_head(false);
  const Qwen3NextModel model = open(config, test::synthetic_tensors(config, 25));
  GenerateOptions plain, speculative;
  plain.max_tokens = speculative.max_tokens = 16;
  speculative.speculative_tokens = 3;
  std::vector<int32_t> prompt = test::random_ids(7, 20, model.config().vocab_size);
  GenerateResult first_plain = generate(model, prompt, plain);
  GenerateResult first_drafted = generate(model, prompt, speculative);
  ASSERT_EQ(first_drafted.tokens, first_plain.tokens);
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first_plain.tokens.begin(), first_plain.tokens.end());
  const std::vector<int32_t> message = test::random_ids(8, 5, model.config().vocab_size);
  next.insert(next.end(), message.begin(), message.end());
  const GenerateResult want = continue_generation(model, model.fork_sequence(first_plain.state), next, plain);
  const GenerateResult resumed = continue_generation(model, std::move(first_drafted.state), next, speculative);
  const GenerateResult cold = continue_generation(model, std::move(first_plain.state), next, speculative);
  for (const GenerateResult* r : {&resumed, &cold}) {
    EXPECT_EQ(r->tokens, want.tokens);
    EXPECT_EQ(state_hashes(model, r->state), state_hashes(model, want.state));
  }
  EXPECT_GT(resumed.speculation.drafted, 0) << "the head's cache came along";
  EXPECT_EQ(cold.speculation.drafted, 0) << "a plain run's state has no head cache";
}

TEST_F(MtpHead, DraftsTheSameBitsInOneCallAsRowByRow) {
  const nlohmann::json config = config_with_head(false);
  const Qwen3NextModel model = open(config, test::synthetic_tensors(config, 22));
  const int64_t T = 9, H = model.config().hidden_size;
  const std::vector<int32_t> ids = test::random_ids(6, T, model.config().vocab_size);
  const Tensor hidden = random_hidden(T, H, 8);  // [T, H]

  SequenceState whole = model.new_sequence(T), rows = model.new_sequence(T);
  Tensor whole_hidden, row_hidden;
  const Tensor whole_logits = backend_.download(model.draft({DraftInput{&whole, 0, ids}}, hidden, &whole_hidden));
  Tensor row_logits;
  for (int64_t t = 0; t < T; ++t)
    row_logits = backend_.download(
        model.draft({DraftInput{&rows, t, {ids[static_cast<size_t>(t)]}}}, hidden.rows(t, t + 1), &row_hidden));
  EXPECT_TRUE(test::same_bits(whole_logits, row_logits));
  EXPECT_TRUE(test::same_bits(whole_hidden, row_hidden));
  const size_t head_layer = static_cast<size_t>(model.config().num_layers);  // the head's layer of the KV pool
  for (const Tensor* pool : {&model.kv_pool().k(head_layer), &model.kv_pool().v(head_layer)})
    EXPECT_TRUE(test::same_bits(gather_positions(backend_, *pool, whole.kv_pages.ids(), T),
                                gather_positions(backend_, *pool, rows.kv_pages.ids(), T)));
  EXPECT_EQ(whole.position, 0) << "drafting does not move the main model's position";

  // A catch-up that writes only the head's cache (no last_hidden: no MLP, norm or lm_head) leaves the cache the
  // last row then reads, so that row drafts the whole call's bits.
  SequenceState caught_up = model.new_sequence(T);
  const std::vector<int32_t> first(ids.begin(), ids.end() - 1);
  EXPECT_EQ(model.draft({DraftInput{&caught_up, 0, first}}, hidden.rows(0, T - 1), nullptr).data(), nullptr);
  Tensor last_hidden;
  EXPECT_TRUE(test::same_bits(backend_.download(model.draft({DraftInput{&caught_up, T - 1, {ids.back()}}},
                                                            hidden.rows(T - 1, T), &last_hidden)),
                              whole_logits));
  EXPECT_TRUE(test::same_bits(last_hidden, whole_hidden));
}

// Drafting among the first ids reads only those rows of the lm_head: the head's logits there are the whole
// vocabulary's first columns, bit for bit, and every draft is their argmax, so below the drafting vocabulary's end.
// Speculation with it makes plain decoding's tokens, greedy or sampled.
TEST_F(MtpHead, DraftsAmongTheFirstIdsAreTheArgmaxOfTheirLogits) {
  const nlohmann::json config = config_with_head(false);
  const Qwen3NextModel model = open(config, test::synthetic_tensors(config, 26));
  const int64_t T = 5, H = model.config().hidden_size, V = model.config().vocab_size, N = 37;
  const std::vector<int32_t> ids = test::random_ids(9, T, V);
  const Tensor hidden = random_hidden(T, H, 11);  // [T, H]

  SequenceState all = model.new_sequence(T), first = model.new_sequence(T);
  Tensor all_hidden, first_hidden;
  const Tensor all_logits = backend_.download(model.draft({DraftInput{&all, 0, ids}}, hidden, &all_hidden));  // [1, V]
  const Tensor first_logits =
      backend_.download(model.draft({DraftInput{&first, 0, ids}}, hidden, &first_hidden, nullptr, N));  // [1, N]
  ASSERT_EQ(first_logits.shape(), (Shape{1, N}));
  EXPECT_EQ(std::memcmp(first_logits.data(), all_logits.data(), N * sizeof(float)), 0);
  EXPECT_TRUE(test::same_bits(first_hidden, all_hidden));
  const auto best = static_cast<int32_t>(std::max_element(first_logits.f32(), first_logits.f32() + N) -
                                         first_logits.f32());  // the first of equal maxima: ties to the lower id

  for (const int64_t vocab : {int64_t{1}, N}) {
    SequenceState s = model.new_sequence(T);
    MtpDrafter drafter(model, vocab);
    const std::vector<std::vector<int32_t>> drafts = drafter.propose({DraftRequest{&s, 0, ids, hidden, 3}});
    ASSERT_EQ(drafts.size(), 1u);
    ASSERT_EQ(drafts[0].size(), 3u);
    for (const int32_t d : drafts[0]) EXPECT_TRUE(d >= 0 && d < vocab) << d << " drafted among " << vocab << " ids";
    if (vocab == N) {
      EXPECT_EQ(drafts[0][0], best);
    }
  }
  test::expect_error_naming([&] { MtpDrafter(model, V + 1); }, "the model's " + std::to_string(V) + " ids");
  test::expect_error_naming([&] { MtpDrafter(model, -1); }, "--draft-vocab -1");

  for (const float temperature : {0.0f, 0.8f}) {
    GenerateOptions plain;
    plain.max_tokens = 30;
    plain.sampling.temperature = temperature;
    plain.sampling.seed = 5;
    const std::vector<int32_t> prompt = test::random_ids(12, 20, V);
    const GenerateResult want = generate(model, prompt, plain);
    for (const int64_t vocab : {int64_t{1}, N, V}) {
      GenerateOptions options = plain;
      options.speculative_tokens = 3;
      options.draft_vocab = vocab;
      const GenerateResult got = generate(model, prompt, options);
      EXPECT_EQ(got.tokens, want.tokens) << "drafts among " << vocab << " ids, temperature " << temperature;
      EXPECT_EQ(state_hashes(model, got.state), state_hashes(model, want.state));
    }
  }
}

// With the layer's attention and MLP outputs zeroed, the head is lm_head(norm(fc([norm(embed(id)) | norm(h)]))):
// fc = [I | 0] must see only the embedding and [0 | I] only the hidden state, as qwen3-next-spec.md section 7 orders
// them. Every norm weight is 0 (zero-centred: a scale of 1).
TEST_F(MtpHead, FcTakesTheEmbeddingFirstAndTheHiddenStateSecond) {
  const nlohmann::json config = config_with_head(true);
  std::vector<test::NamedTensor> tensors = test::synthetic_tensors(config, 23);
  const ModelConfig c = parse_model_config(config.dump(), "config");
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const auto fill = [&](const std::string& name, float value) {
    test::NamedTensor& t = tensor(tensors, name);
    t = test::make_tensor(name, DType::kF32, t.shape,
                          std::vector<float>(static_cast<size_t>(shape_numel(t.shape)), value));
  };
  for (const char* name : {"mtp.layers.0.self_attn.o_proj.weight", "mtp.layers.0.mlp.down_proj.weight",
                           "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"})
    fill(name, 0.0f);
  std::vector<float> lm_head(static_cast<size_t>(V * H)), embed(static_cast<size_t>(V * H));
  std::mt19937_64 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& x : lm_head) x = dist(rng);
  for (float& x : embed) x = dist(rng);
  tensor(tensors, "lm_head.weight") = test::make_tensor("lm_head.weight", DType::kF32, {V, H}, lm_head);
  tensor(tensors, "model.embed_tokens.weight") =
      test::make_tensor("model.embed_tokens.weight", DType::kF32, {V, H}, embed);
  std::vector<float> h(static_cast<size_t>(H));
  for (float& x : h) x = dist(rng);
  const int32_t id = 17;
  const float eps = static_cast<float>(c.rms_norm_eps);
  // The RMSNorm of x, in double.
  const auto normed = [&](std::vector<double> x) {
    double squares = 0;
    for (double v : x) squares += v * v;
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(x.size()) + eps);
    for (double& v : x) v *= inv;
    return x;
  };
  for (bool embedding_half : {true, false}) {
    std::vector<float> fc(static_cast<size_t>(H * 2 * H), 0.0f);  // [H, 2H]
    for (int64_t i = 0; i < H; ++i) fc[static_cast<size_t>(i * 2 * H + i + (embedding_half ? 0 : H))] = 1.0f;
    tensor(tensors, "mtp.fc.weight") = test::make_tensor("mtp.fc.weight", DType::kF32, {H, 2 * H}, fc);
    const Qwen3NextModel model = open(config, tensors);
    SequenceState state = model.new_sequence(1);
    Tensor host_hidden = Tensor::zeros(DType::kF32, {1, H}), last;
    std::copy(h.begin(), h.end(), host_hidden.f32());
    const Tensor logits = backend_.download(model.draft({DraftInput{&state, 0, {id}}}, host_hidden, &last));  // [1, V]
    std::vector<double> source(static_cast<size_t>(H));
    for (int64_t i = 0; i < H; ++i)
      source[static_cast<size_t>(i)] =
          embedding_half ? embed[static_cast<size_t>(id * H + i)] : h[static_cast<size_t>(i)];
    const std::vector<double> x = normed(normed(source));
    double err = 0;
    for (int64_t v = 0; v < V; ++v) {
      double want = 0;
      for (int64_t i = 0; i < H; ++i) want += lm_head[static_cast<size_t>(v * H + i)] * x[static_cast<size_t>(i)];
      err = std::max(err, std::abs(want - logits.f32()[v]));
    }
    // FP32 sums of 16 products of values near 1, against double: a few ulps of the logits' size (about 4).
    EXPECT_FALSE(!(err <= 1e-5)) << (embedding_half ? "fc = [I | 0]" : "fc = [0 | I]") << ": max error " << err;
  }
}

// An FP8 mtp.fc whose halves cut a 128-column scale slice (hidden 16) is widened at load: the head drafts the bits of
// the same weights stored in F32.
TEST_F(MtpHead, AnFp8FcWhoseHalvesCutASliceLoadsWidened) {
  nlohmann::json config = config_with_head(false);
  std::vector<test::NamedTensor> tensors = test::synthetic_tensors(config, 26);
  const int64_t H = config["hidden_size"].get<int64_t>();
  test::NamedTensor codes{"mtp.fc.weight", DType::kF8E4M3, {H, 2 * H}, {}};
  std::vector<float> values;
  for (int64_t i = 0; i < H * 2 * H; ++i) {
    const auto byte = static_cast<uint8_t>((i * 37) % 120);  // finite codes
    codes.bytes.push_back(byte);
    values.push_back(fp8_e4m3_to_f32(byte) * 0.25f);
  }
  tensor(tensors, "mtp.fc.weight") = test::make_tensor("mtp.fc.weight", DType::kF32, {H, 2 * H}, values);
  const Qwen3NextModel twin = open(config, tensors);
  const std::vector<int32_t> ids = {3, 9, 4};
  Tensor hidden = Tensor::zeros(DType::kF32, {3, H});  // [3, H]
  for (int64_t i = 0; i < 3 * H; ++i) hidden.f32()[i] = 0.01f * static_cast<float>(i % 17);
  SequenceState a = twin.new_sequence(3);
  Tensor last;
  const Tensor want = backend_.download(twin.draft({DraftInput{&a, 0, ids}}, hidden, &last));
  nlohmann::json quantized = config;
  quantized["quantization_config"] = {
      {"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  tensor(tensors, "mtp.fc.weight") = codes;
  tensors.push_back(test::make_tensor("mtp.fc.weight_scale_inv", DType::kF32, {1, 1}, {0.25f}));
  const Qwen3NextModel fp8 = open(quantized, tensors);
  SequenceState b = fp8.new_sequence(3);
  EXPECT_TRUE(test::same_bits(backend_.download(fp8.draft({DraftInput{&b, 0, ids}}, hidden, &last)), want));
}

TEST_F(MtpHead, LoadsOnlyWhenAskedAndRefusesWhatIsMissing) {
  nlohmann::json config = config_with_head(false);
  std::vector<test::NamedTensor> tensors = test::synthetic_tensors(config, 24);
  EXPECT_FALSE(open(config, tensors, /*mtp=*/false).has_mtp()) << "mtp.* is skipped unless asked for";
  {
    const Qwen3NextModel plain = open(config, tensors, /*mtp=*/false);
    GenerateOptions options;
    options.speculative_tokens = 2;
    test::expect_error_naming([&] { generate(plain, {1, 2, 3}, options); }, "multi-token-prediction head");
  }
  nlohmann::json undeclared = config;
  undeclared.erase("mtp_num_hidden_layers");
  test::expect_error_naming([&] { open(undeclared, tensors); }, "mtp_num_hidden_layers");
  std::vector<test::NamedTensor> missing;
  for (const test::NamedTensor& t : tensors)
    if (t.name != "mtp.norm.weight") missing.push_back(t);
  test::expect_error_naming([&] { open(config, missing); }, "missing tensor 'mtp.norm.weight'");
  GenerateOptions too_many;
  too_many.speculative_tokens = kMaxSpeculativeTokens + 1;
  test::expect_error_naming([&] { check_generation(parse_model_config(config.dump(), "c"), 3, too_many); },
                            "speculative tokens must be in 0..8");
}

// fc's halves: a weight's columns, and an FP8 weight's scales with them.
TEST(ColumnRange, CopiesColumnsAndTheirFp8Scales) {
  Tensor plain = Tensor::zeros(DType::kF32, {2, 6});
  for (int i = 0; i < 12; ++i) plain.f32()[i] = static_cast<float>(i);
  const Tensor right = column_range(plain, 3, 6);
  ASSERT_EQ(right.shape(), Shape({2, 3}));
  EXPECT_EQ(std::vector<float>(right.f32(), right.f32() + 6), std::vector<float>({3, 4, 5, 9, 10, 11}));

  Tensor scales = Tensor::zeros(DType::kF32, {2, 3});  // [N, ceil(K / 128)]
  for (int i = 0; i < 6; ++i) scales.f32()[i] = static_cast<float>(i + 1);
  const Tensor fp8 = Tensor::zeros(DType::kF8E4M3, {2, 300}).with_block_scales(scales);
  const Tensor tail = column_range(fp8, 128, 300);
  ASSERT_NE(tail.block_scales(), nullptr);
  const Tensor& s = *tail.block_scales();
  EXPECT_EQ(std::vector<float>(s.f32(), s.f32() + 4), std::vector<float>({2, 3, 5, 6}));
  test::expect_error_naming([&] { column_range(fp8, 100, 300); }, "cut an FP8 weight's 128-column scale slices");
}

// An NVFP4 weight's halves: its packed codes, its group scales with them, its weight scale as it was.
TEST(ColumnRange, CopiesColumnsAndTheirNvfp4Scales) {
  Tensor codes = Tensor::zeros(DType::kE2M1, {2, 64});  // 32 bytes a row
  for (int i = 0; i < 64; ++i) codes.data_as<uint8_t>()[i] = static_cast<uint8_t>(i);
  Tensor groups = Tensor::zeros(DType::kF8E4M3, {2, 4});
  for (int i = 0; i < 8; ++i) groups.data_as<uint8_t>()[i] = static_cast<uint8_t>(0x30 + i);
  const Tensor w = codes.with_block_scales(Tensor::from_f32({0.5f, 0.25f}, {2, 1})).with_group_scales(groups);
  const Tensor right = column_range(w, 32, 64);
  ASSERT_EQ(right.shape(), Shape({2, 32}));
  ASSERT_EQ(right.nbytes(), 32u);
  const auto* got = right.data_as<const uint8_t>();
  EXPECT_EQ(std::vector<int>(got, got + 32)[0], 16);   // row 0, byte 16
  EXPECT_EQ(std::vector<int>(got, got + 32)[16], 48);  // row 1, byte 16
  ASSERT_NE(right.group_scales(), nullptr);
  const auto* g = right.group_scales()->data_as<const uint8_t>();
  EXPECT_EQ(std::vector<int>(g, g + 4), std::vector<int>({0x32, 0x33, 0x36, 0x37}));
  EXPECT_EQ(right.block_scales()->f32()[1], 0.25f);
  // Widened, the halves are the whole weight's columns.
  const Tensor whole = widen_quantized(w), half = widen_quantized(right);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 32; ++c) EXPECT_EQ(half.f32()[r * 32 + c], whole.f32()[r * 64 + 32 + c]);
  test::expect_error_naming([&] { column_range(w, 8, 64); }, "cut an NVFP4 weight's 16-column scale groups");
}

}  // namespace
}  // namespace plumb
