// The recurrent state pool: slots taken lowest first and zeroed whatever they held, growth that keeps every slot's
// memory where it is, copy by index, slots returned when sequences go, and a runner that never holds more slots than
// it has.
#include "model/recurrent_pool.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/model_runner.h"
#include "support/fixtures.h"

namespace plumb {
namespace {

// Layers 0 and 2 are GDN layers, layer 1 attends: C = 2·nk·dk + nv·dv = 2·1·2 + 2·3 = 10, K = 4.
ModelConfig small_config() {
  ModelConfig c;
  c.num_layers = 3;
  c.layer_types = {LayerKind::kGatedDeltaNet, LayerKind::kFullAttention, LayerKind::kGatedDeltaNet};
  c.linear_conv_kernel_dim = 4;
  c.linear_num_key_heads = 1;
  c.linear_key_head_dim = 2;
  c.linear_num_value_heads = 2;
  c.linear_value_head_dim = 3;
  return c;
}

// Fills slot `slot`'s state in every GDN layer with `value`.
void fill(const RecurrentStatePool& pool, int32_t slot, float value) {
  for (size_t layer : {size_t{0}, size_t{2}})
    for (const Tensor& t : {pool.conv_state(layer, slot), pool.recurrent_state(layer, slot)})
      std::fill(t.f32(), t.f32() + t.numel(), value);
}

bool holds(const RecurrentStatePool& pool, int32_t slot, float value) {
  for (size_t layer : {size_t{0}, size_t{2}})
    for (const Tensor& t : {pool.conv_state(layer, slot), pool.recurrent_state(layer, slot)})
      if (!std::all_of(t.f32(), t.f32() + t.numel(), [&](float x) { return x == value; })) return false;
  return true;
}

TEST(RecurrentStatePool, SlotsAreTakenLowestFirstAndZeroedWhateverTheyHeld) {
  CpuBackend be;
  const ModelConfig c = small_config();
  RecurrentStatePool pool(be, c);
  EXPECT_EQ(pool.slot_bytes(), 2 * (10 * 3 + 2 * 2 * 3) * 4);
  EXPECT_EQ(pool.capacity(), 0);
  EXPECT_EQ(pool.acquire(), 0);  // grows by one slot
  EXPECT_EQ(pool.acquire(), 1);
  EXPECT_EQ(pool.capacity(), 2);
  EXPECT_EQ(pool.conv_state(0, 1).shape(), (Shape{10, 3}));
  EXPECT_EQ(pool.recurrent_state(2, 1).shape(), (Shape{2, 2, 3}));
  EXPECT_FALSE(pool.conv_state(1, 0).data());  // no state for the attention layer
  fill(pool, 0, 7.0f);
  fill(pool, 1, 8.0f);
  pool.release(0);
  EXPECT_EQ(pool.free_slots(), 1);
  EXPECT_EQ(pool.acquire(), 0);
  EXPECT_TRUE(holds(pool, 0, 0.0f)) << "a slot taken again starts from zeros";
  EXPECT_TRUE(holds(pool, 1, 8.0f)) << "the other slot is untouched";
  EXPECT_THROW(pool.release(5), Error);
  pool.release(1);
  EXPECT_THROW(pool.release(1), Error);  // not taken any more
}

TEST(RecurrentStatePool, ReserveAddsOneBlockAndMovesNoSlot) {
  CpuBackend be;
  RecurrentStatePool pool(be, small_config());
  const int32_t first = pool.acquire();
  fill(pool, first, 3.0f);
  const void* where = pool.recurrent_state(2, first).data();
  pool.reserve(64);
  EXPECT_EQ(pool.capacity(), 64);
  EXPECT_EQ(pool.free_slots(), 63);
  EXPECT_EQ(pool.recurrent_state(2, first).data(), where);
  EXPECT_TRUE(holds(pool, first, 3.0f));
  // The block's slots are adjacent rows of one tensor per layer and kind.
  EXPECT_EQ(static_cast<const char*>(pool.recurrent_state(0, 2).data()) -
                static_cast<const char*>(pool.recurrent_state(0, 1).data()),
            2 * 2 * 3 * 4);
  for (int i = 1; i < 64; ++i) EXPECT_EQ(pool.acquire(), i);
  EXPECT_EQ(pool.capacity(), 64) << "reserved slots are used before the pool grows";
  pool.reserve(10);  // already there: nothing happens
  EXPECT_EQ(pool.capacity(), 64);
}

TEST(RecurrentStatePool, CopyMakesOneSlotAnothersByIndex) {
  CpuBackend be;
  RecurrentStatePool pool(be, small_config());
  pool.reserve(3);
  for (int32_t slot = 0; slot < 3; ++slot) EXPECT_EQ(pool.acquire(), slot);
  fill(pool, 0, 1.5f);
  fill(pool, 2, -2.0f);
  pool.copy(0, 1);
  EXPECT_TRUE(holds(pool, 1, 1.5f));
  EXPECT_TRUE(holds(pool, 0, 1.5f));
  EXPECT_TRUE(holds(pool, 2, -2.0f));
  EXPECT_THROW(pool.copy(0, 3), Error);
}

TEST(RecurrentStatePool, SequencesHoldASlotAndReturnIt) {
  CpuBackend be;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", be);
  RecurrentStatePool& pool = model.recurrent_pool();
  {
    SequenceState a = model.new_sequence(), b = model.new_sequence();
    EXPECT_EQ(a.recurrent_slot.id(), 0);
    EXPECT_EQ(b.recurrent_slot.id(), 1);
    EXPECT_EQ(pool.used_slots(), 2);
    model.forward(a, {1, 2, 3}, LogitsRows::kLast);
    SequenceState fork = model.fork_sequence(a);
    EXPECT_EQ(fork.recurrent_slot.id(), 2);
    for (size_t i = 0; i < a.layers.size(); ++i) {
      const Tensor& x = a.layers[i].recurrent_state;
      if (!x.data()) continue;
      EXPECT_EQ(x.data(), pool.recurrent_state(i, 0).data()) << "layer " << i << ": the state is the slot's";
      const Tensor& y = fork.layers[i].recurrent_state;
      EXPECT_TRUE(std::equal(x.f32(), x.f32() + x.numel(), y.f32())) << "layer " << i;
    }
    std::swap(a, b);  // two sequences swap states by swapping handles: nothing is copied
    EXPECT_EQ(a.recurrent_slot.id(), 1);
    b = model.new_sequence();  // replaced: slot 0 goes back
    EXPECT_EQ(b.recurrent_slot.id(), 3);
    EXPECT_EQ(pool.used_slots(), 3);
  }
  EXPECT_EQ(pool.used_slots(), 0);
}

TEST(RecurrentStatePool, ARunnerOfNSlotsHoldsNoMoreThanNSequencesState) {
  CpuBackend be;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", be);
  ModelRunner runner(model, 2);
  for (int round = 0; round < 3; ++round) {
    // Both slots start a fresh sequence each round: the old states go back before the new ones are taken.
    runner.forward({{0, 0, {1, 2}}, {1, 0, {3}}});
    EXPECT_EQ(model.recurrent_pool().capacity(), 2) << "round " << round;
  }
  runner.release(0);
  runner.release(1);
  EXPECT_EQ(model.recurrent_pool().used_slots(), 0);
}

}  // namespace
}  // namespace plumb
