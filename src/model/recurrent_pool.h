// The Gated DeltaNet layers' per-sequence state, owned once: for each slot, every GDN layer's conv window [C, K-1]
// and delta-rule state [nv, dk, dv], both F32. Slots live in blocks allocated whole (one tensor per layer and kind,
// [slots, ...]), so a slot's state is a row of its block and a block never moves: a server reserves every slot it
// will use at start, and no step allocates state. A sequence owns its slot through a RecurrentSlot handle, which
// returns it to the pool when the sequence's state is destroyed or replaced.
//
// By index, as a prefix cache and speculative decoding want them: copy() makes one slot's state another's (a
// snapshot, or one state per draft token), and two sequences swap states by swapping their handles.
//
// Not thread-safe: the thread that runs a model's forward calls takes and returns its slots.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "model/config.h"
#include "ops/backend.h"

namespace plumb {

class RecurrentStatePool {
 public:
  // Slots for the GDN layers of `config`. Starts empty: slots are added as they are taken or reserved.
  RecurrentStatePool(Backend& backend, const ModelConfig& config);
  RecurrentStatePool(const RecurrentStatePool&) = delete;
  RecurrentStatePool& operator=(const RecurrentStatePool&) = delete;

  int64_t capacity() const { return static_cast<int64_t>(owner_.size()); }  // slots
  int64_t free_slots() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_slots() const { return capacity() - free_slots(); }
  // Device bytes one slot takes over every GDN layer.
  int64_t slot_bytes() const;

  // Grows to at least `slots` slots with one new block; slots already there keep their memory.
  void reserve(int64_t slots);
  // The lowest free slot, its state zeroed, or a copy of slot `copy_of`'s when one is given (written once, not
  // zeroed first); grows by one slot when none is free.
  int32_t acquire(std::optional<int32_t> copy_of = std::nullopt);
  // Returns a slot. Throws plumb::Error for a slot that is not taken.
  void release(int32_t slot);
  // Slot `to`'s state becomes a copy of slot `from`'s, in every GDN layer.
  void copy(int32_t from, int32_t to);

  // Slot `slot`'s state in layer `layer`: views into its block, [C, K-1] and [nv, dk, dv] F32; undefined for a
  // layer without GDN.
  Tensor conv_state(size_t layer, int32_t slot) const;
  Tensor recurrent_state(size_t layer, int32_t slot) const;

 private:
  struct Block {
    int32_t first = 0;                    // its first slot's id
    std::vector<Tensor> conv, recurrent;  // [layers]: [slots, C, K-1] and [slots, nv, dk, dv]
  };
  const Block& block_of(int32_t slot) const;
  void zero(int32_t slot);

  Backend& backend_;
  std::vector<bool> gdn_layers_;  // [layers]
  Shape conv_shape_, recurrent_shape_;
  Tensor conv_zeros_, recurrent_zeros_;  // one slot's zeros, what a taken slot starts from
  std::vector<Block> blocks_;
  std::vector<uint32_t> owner_;  // [capacity]: each slot's block
  std::set<int32_t> free_;
};

// One sequence's slot of a RecurrentStatePool. Move-only; destroying or reassigning the handle returns the slot.
class RecurrentSlot {
 public:
  RecurrentSlot() = default;
  // Takes a free slot of `pool`, zeroed or a copy of slot `copy_of`'s.
  explicit RecurrentSlot(std::shared_ptr<RecurrentStatePool> pool, std::optional<int32_t> copy_of = std::nullopt);
  ~RecurrentSlot() { reset(); }
  RecurrentSlot(RecurrentSlot&& other) noexcept;
  RecurrentSlot& operator=(RecurrentSlot&& other) noexcept;
  RecurrentSlot(const RecurrentSlot&) = delete;
  RecurrentSlot& operator=(const RecurrentSlot&) = delete;

  void reset();
  int32_t id() const { return id_; }  // -1 when it holds none
  const std::shared_ptr<RecurrentStatePool>& pool() const { return pool_; }

 private:
  std::shared_ptr<RecurrentStatePool> pool_;
  int32_t id_ = -1;
};

}  // namespace plumb
