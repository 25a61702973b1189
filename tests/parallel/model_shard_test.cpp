// A whole model split over CPU ranks in threads, checked against the unsplit model: with the exact reduction every
// rank's logits (a batch's prompt, decode steps after it, and the MTP head's drafts) are the unsplit model's bits at
// 1, 2 and 4 ranks, for a Qwen3-Next model (MoE with a shared expert beside a dense layer, untied, with an MTP head)
// and a tied dense Qwen3.5 one whose KV and key heads split rather than being copied; the sum reduction is the same
// run to run and near, not equal to, the unsplit bits; so does every checkpoint fixture, whose heads start inside
// slices; splits the heads do not allow are refused by name.
#include "parallel/model_shard.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "loader/load_model.h"
#include "model/synthetic_weights.h"
#include "parallel/thread_world.h"
#include "support/fixtures.h"

namespace plumb::parallel {
namespace {

constexpr std::chrono::milliseconds kTimeout{120000};

// Heads and widths chosen so that every rank's output-projection columns start at a slice boundary at 2 and 4
// ranks: attention 4 heads of 128 (2 KV heads, copied at 4 ranks), GDN 4 value heads of 128 over 2 key heads, dense
// and shared-expert widths of 512; 6 experts split 3/3 and 2/2/1/1; a vocabulary of 601 split unevenly.
const char* kQwen3NextJson = R"({
  "model_type": "qwen3_next", "vocab_size": 601, "hidden_size": 64, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128, "full_attention_interval": 2,
  "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
  "linear_key_head_dim": 32, "linear_value_head_dim": 128, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
  "intermediate_size": 512, "mlp_only_layers": [1], "num_experts": 6, "num_experts_per_tok": 3,
  "moe_intermediate_size": 48, "shared_expert_intermediate_size": 512, "norm_topk_prob": true,
  "mtp_num_hidden_layers": 1, "tie_word_embeddings": false})";

// Dense and tied; 8 query heads of 64 over 4 KV heads and 8 value heads of 64 over 4 key heads, all split at 2 and 4
// ranks; a width of 640 (five slices: 3/2 and 2/1/1/1).
const char* kQwen35DenseJson = R"({
  "model_type": "qwen3_5_text", "vocab_size": 333, "hidden_size": 48, "num_hidden_layers": 3,
  "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64, "full_attention_interval": 3,
  "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
  "linear_key_head_dim": 16, "linear_value_head_dim": 64, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
  "intermediate_size": 640, "tie_word_embeddings": true})";

ModelConfig config_of(const char* json) {
  return parse_model_config(json, "model_shard_test");
}

void append(std::vector<float>& out, Backend& be, const Tensor& t) {
  const Tensor host = be.download(t);
  out.insert(out.end(), host.f32(), host.f32() + host.numel());
}

// Every logit a fixed script of calls produces: two sequences' prompts in one batch, three decode steps of both,
// and (with an MTP head) a draft over the first sequence's prompt.
std::vector<float> script(const Qwen3NextModel& model) {
  Backend& be = model.backend();
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> a, b;
  for (int i = 0; i < 19; ++i) a.push_back(static_cast<int32_t>((i * 37 + 5) % V));
  for (int i = 0; i < 7; ++i) b.push_back(static_cast<int32_t>((i * 101 + 300) % V));
  SequenceState sa = model.new_sequence(), sb = model.new_sequence();
  std::vector<float> out;
  Tensor hidden;  // [26, H]
  append(out, be, model.forward({{&sa, a}, {&sb, b}}, LogitsRows::kAll, GdnAlgorithm::kChunked, &hidden));
  for (int step = 0; step < 3; ++step) {
    const std::vector<int32_t> next_a{static_cast<int32_t>((step * 211 + 17) % V)};
    const std::vector<int32_t> next_b{static_cast<int32_t>((step * 97 + 590) % V)};
    append(out, be, model.forward({{&sa, next_a}, {&sb, next_b}}, LogitsRows::kLast));
  }
  if (model.has_mtp()) {
    std::vector<int32_t> shifted(a.begin() + 1, a.end());
    shifted.push_back(42);
    Tensor last_hidden;
    const Tensor a_hidden = hidden.rows(0, static_cast<int64_t>(a.size()));
    append(out, be, model.draft({DraftInput{&sa, 0, shifted}}, a_hidden, &last_hidden));
    append(out, be, last_hidden);
  }
  return out;
}

std::vector<float> unsplit(const ModelConfig& config, bool mtp) {
  CpuBackend cpu;
  const Qwen3NextModel model = synthetic_model(config, cpu, 7, SyntheticWeights::kBF16, mtp);
  return script(model);
}

// Every rank's logits of the script, the model split over `world` ranks.
std::vector<std::vector<float>> split(const ModelConfig& config, bool mtp, int world, RowReduction reduction) {
  CpuBackend host;
  const Qwen3NextModel whole = synthetic_model(config, host, 7, SyntheticWeights::kBF16, mtp);
  std::vector<std::vector<float>> out(static_cast<size_t>(world));
  run_thread_ranks(world, kTimeout, [&](Collective& collective) {
    CpuBackend cpu;
    RankBackend be(cpu, collective);
    const Qwen3NextModel model =
        rank_model(shard_model(config, whole.weights(), collective.rank(), world, reduction), be);
    out[static_cast<size_t>(collective.rank())] = script(model);
  });
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ModelShard, ExactSplitGivesTheUnsplitBitsOnEveryRank) {
  for (const auto& [json, mtp] : {std::pair{kQwen3NextJson, true}, std::pair{kQwen35DenseJson, false}}) {
    const ModelConfig config = config_of(json);
    const std::vector<float> expected = unsplit(config, mtp);
    ASSERT_FALSE(expected.empty());
    for (const float v : expected) ASSERT_TRUE(std::isfinite(v));
    for (const int world : {1, 2, 4}) {
      const std::vector<std::vector<float>> ranks = split(config, mtp, world, RowReduction::kExact);
      for (int r = 0; r < world; ++r)
        EXPECT_TRUE(same_bits(ranks[static_cast<size_t>(r)], expected))
            << config.model_type << ": rank " << r << " of " << world;
    }
  }
}

// Every checkpoint fixture, loaded as plumb loads a model folder: heads of 32 and 24 and MLP widths of 96 and 48 start
// a rank's columns inside a 128-wide slice, so the exact reduction's exchange carries those slices' activations; FP8,
// BF16, FP16 and F32 weights, tied and untied, sharded files and both expert layouts.
TEST(ModelShard, ExactSplitOfEveryFixtureGivesItsUnsplitBits) {
  int fixtures = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::fixtures_dir() + "/models")) {
    if (!std::filesystem::exists(entry.path() / "config.json")) continue;
    ++fixtures;
    CpuBackend host;
    LoadedModel loaded = load_model(entry.path().string(), host);
    const ModelConfig config = loaded.config;
    const Qwen3NextModel whole(config, std::move(loaded.weights), host);
    const std::vector<float> expected = script(whole);
    // Every world whose ranks the fixture's heads divide among (all of them divide among two).
    for (const int world : {2, 4}) {
      if (config.num_attention_heads % world != 0 || config.linear_num_value_heads % world != 0) continue;
      std::vector<std::vector<float>> ranks(static_cast<size_t>(world));
      run_thread_ranks(world, kTimeout, [&](Collective& collective) {
        CpuBackend cpu;
        RankBackend be(cpu, collective);
        const Qwen3NextModel model =
            rank_model(shard_model(config, whole.weights(), collective.rank(), world, RowReduction::kExact), be);
        ranks[static_cast<size_t>(collective.rank())] = script(model);
      });
      for (int r = 0; r < world; ++r)
        EXPECT_TRUE(same_bits(ranks[static_cast<size_t>(r)], expected))
            << entry.path().filename() << ": rank " << r << " of " << world;
    }
  }
  EXPECT_GE(fixtures, 10);
}

TEST(ModelShard, SumSplitIsRepeatableAndNearTheUnsplitModel) {
  const ModelConfig config = config_of(kQwen3NextJson);
  const std::vector<float> expected = unsplit(config, true);
  const std::vector<std::vector<float>> first = split(config, true, 2, RowReduction::kSum);
  const std::vector<std::vector<float>> second = split(config, true, 2, RowReduction::kSum);
  EXPECT_TRUE(same_bits(first[0], second[0]));
  EXPECT_TRUE(same_bits(first[0], first[1]));
  ASSERT_EQ(first[0].size(), expected.size());
  // The control: regrouping the K-slice sums rounds differently somewhere among the script's logits.
  EXPECT_FALSE(same_bits(first[0], expected));
  double largest = 0.0, worst = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    largest = std::max(largest, std::abs(static_cast<double>(expected[i])));
    const double err = std::abs(static_cast<double>(first[0][i]) - expected[i]);
    if (!(err <= worst)) worst = err;  // a NaN stays, and fails the bound below
  }
  // Each row-parallel product's regrouping moves its outputs by a few F32 roundings of their magnitude, which five
  // layers carry on to the logits: measured 1.9e-7 of the largest logit. 1e-5 bounds it with room, while a rank's
  // share lost or added twice moves logits by about their own size.
  EXPECT_TRUE(worst <= 1e-5 * largest) << "worst " << worst << " of " << largest;
}

// The released models' shapes split over 2, 4 and 8 ranks, planned without their weights: Qwen3-Next-80B-A3B's 16
// query heads over 2 KV heads (copied at 4 and 8 ranks), 32 GDN value heads over 16 key heads, 512 experts and a
// shared expert of 512 (four slices: by columns at 8 ranks); Qwen3.5-35B-A3B's 256 experts and 248,320-token
// vocabulary.
TEST(ModelShard, TheReleasedModelsSplitOverTwoFourAndEightRanks) {
  struct Expected {
    int world;
    int64_t query, kv, value, key, shared;
  };
  for (const char* name : {"qwen3-next-80b-a3b", "qwen3.5-35b-a3b"}) {
    const ModelConfig config = synthetic_config(name).config;
    for (const Expected& e :
         {Expected{2, 8, 1, 16, 8, 256}, Expected{4, 4, 1, 8, 4, 128}, Expected{8, 2, 1, 4, 2, 64}}) {
      int64_t experts = 0, vocabulary = 0;
      for (int rank = 0; rank < e.world; ++rank) {
        const SplitPlan plan = plan_split(config, rank, e.world);
        const ModelConfig& c = plan.config;
        EXPECT_EQ(c.num_attention_heads, e.query) << name << " at " << e.world;
        EXPECT_EQ(c.num_key_value_heads, e.kv) << name << " at " << e.world;
        EXPECT_EQ(c.linear_num_value_heads, e.value) << name << " at " << e.world;
        EXPECT_EQ(c.linear_num_key_heads, e.key) << name << " at " << e.world;
        EXPECT_EQ(c.shared_expert_intermediate_size, e.shared) << name << " at " << e.world;
        EXPECT_EQ(plan.experts.end - plan.experts.begin, config.num_experts / e.world) << name << " at " << e.world;
        // Rank r's KV head is the one its query heads read: 8 query heads a KV head.
        EXPECT_EQ(plan.kv_heads.begin, plan.attention_heads.begin / 8) << name << " at " << e.world;
        experts += plan.experts.end - plan.experts.begin;
        vocabulary += plan.vocabulary.end - plan.vocabulary.begin;
      }
      EXPECT_EQ(experts, config.num_experts);
      EXPECT_EQ(vocabulary, config.vocab_size);
    }
  }
}

// An expert id outside the layer's experts, which moe_experts refuses unsplit, is refused split too (no rank holds it,
// so it would otherwise add nothing).
TEST(ModelShard, AnExpertIdOutsideTheLayerIsRefused) {
  std::string message;
  try {
    run_thread_ranks(1, kTimeout, [](Collective& collective) {
      CpuBackend cpu;
      RankBackend be(cpu, collective);
      const ExpertWeights experts{Tensor::zeros(DType::kF32, {2, 8, 4}), Tensor::zeros(DType::kF32, {2, 4, 4})};
      be.bind_experts(experts, ColumnRange{0, 2}, 2);
      Tensor x = Tensor::zeros(DType::kF32, {1, 4}), y = Tensor::zeros(DType::kF32, {1, 4});
      Tensor ids = Tensor::zeros(DType::kI32, {1, 2}), weights = Tensor::zeros(DType::kF32, {1, 2});
      ids.data_as<int32_t>()[1] = 2;
      be.moe_experts(x, ids, weights, experts, y);
    });
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "rank 0: moe_experts: token 0 slot 1 has expert id 2, outside [0, 2)");
}

TEST(ModelShard, RefusesSplitsTheHeadsDoNotAllow) {
  const ModelConfig config = config_of(kQwen3NextJson);
  CpuBackend cpu;
  const Qwen3NextModel whole = synthetic_model(config, cpu, 7);
  try {
    shard_model(config, whole.weights(), 0, 3, RowReduction::kExact);
    FAIL() << "three ranks over four query heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 attention query heads do not split evenly over 3 ranks"), std::string::npos)
        << e.what();
  }
  // Eight ranks: more than the four query heads.
  try {
    shard_model(config, whole.weights(), 0, 8, RowReduction::kExact);
    FAIL() << "eight ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("heads do not split evenly over 8 ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace plumb::parallel
