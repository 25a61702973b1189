#include "model/recurrent_pool.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"

namespace plumb {

RecurrentStatePool::RecurrentStatePool(Backend& backend, const ModelConfig& config)
    : backend_(backend),
      conv_shape_{config.conv_dim(), config.linear_conv_kernel_dim - 1},
      recurrent_shape_{config.linear_num_value_heads, config.linear_key_head_dim, config.linear_value_head_dim} {
  for (LayerKind kind : config.layer_types) gdn_layers_.push_back(kind == LayerKind::kGatedDeltaNet);
}

int64_t RecurrentStatePool::slot_bytes() const {
  const auto layers = static_cast<int64_t>(std::count(gdn_layers_.begin(), gdn_layers_.end(), true));
  return layers * (shape_numel(conv_shape_) + shape_numel(recurrent_shape_)) *
         static_cast<int64_t>(dtype_size(DType::kF32));
}

void RecurrentStatePool::reserve(int64_t slots) {
  if (slots <= capacity()) return;
  PLUMB_CHECK(slots <= std::numeric_limits<int32_t>::max(), "recurrent state pool: {} slots exceed 32-bit ids", slots);
  const int64_t count = slots - capacity();
  Block block;
  block.first = static_cast<int32_t>(capacity());
  const auto with_slots = [&](const Shape& shape) {
    Shape s{count};
    s.insert(s.end(), shape.begin(), shape.end());
    return s;
  };
  for (bool gdn : gdn_layers_) {
    block.conv.push_back(gdn ? backend_.zeros(DType::kF32, with_slots(conv_shape_)) : Tensor());
    block.recurrent.push_back(gdn ? backend_.zeros(DType::kF32, with_slots(recurrent_shape_)) : Tensor());
  }
  for (int64_t i = 0; i < count; ++i) {
    owner_.push_back(static_cast<uint32_t>(blocks_.size()));
    free_.insert(static_cast<int32_t>(block.first + i));
  }
  blocks_.push_back(std::move(block));
}

int32_t RecurrentStatePool::acquire(std::optional<int32_t> copy_of) {
  if (free_.empty()) reserve(capacity() + 1);
  const int32_t slot = *free_.begin();
  if (copy_of) {
    copy(*copy_of, slot);  // checks copy_of first: on a bad one the slot stays free
  } else {
    zero(slot);
  }
  free_.erase(free_.begin());
  return slot;
}

void RecurrentStatePool::release(int32_t slot) {
  PLUMB_CHECK(slot >= 0 && slot < capacity() && !free_.count(slot), "recurrent state pool: slot {} is not taken", slot);
  free_.insert(slot);
}

void RecurrentStatePool::copy(int32_t from, int32_t to) {
  PLUMB_CHECK(from >= 0 && from < capacity() && to >= 0 && to < capacity(),
              "recurrent state pool: copy of slot {} to {} of {}", from, to, capacity());
  std::vector<Tensor> srcs, dsts;
  for (size_t i = 0; i < gdn_layers_.size(); ++i) {
    if (!gdn_layers_[i]) continue;
    srcs.insert(srcs.end(), {conv_state(i, from), recurrent_state(i, from)});
    dsts.insert(dsts.end(), {conv_state(i, to), recurrent_state(i, to)});
  }
  backend_.copy_all(srcs, dsts);
}

// A taken slot starts from zeros whatever an earlier sequence left in it: one copy of a slot's zeros per layer and
// kind, made once, copied into every layer in one copy_all.
void RecurrentStatePool::zero(int32_t slot) {
  if (!conv_zeros_.data()) {
    conv_zeros_ = backend_.zeros(DType::kF32, conv_shape_);
    recurrent_zeros_ = backend_.zeros(DType::kF32, recurrent_shape_);
  }
  std::vector<Tensor> srcs, dsts;
  for (size_t i = 0; i < gdn_layers_.size(); ++i) {
    if (!gdn_layers_[i]) continue;
    srcs.insert(srcs.end(), {conv_zeros_, recurrent_zeros_});
    dsts.insert(dsts.end(), {conv_state(i, slot), recurrent_state(i, slot)});
  }
  backend_.copy_all(srcs, dsts);
}

const RecurrentStatePool::Block& RecurrentStatePool::block_of(int32_t slot) const {
  PLUMB_CHECK(slot >= 0 && slot < capacity(), "recurrent state pool: slot {} outside its {} slots", slot, capacity());
  return blocks_[owner_[static_cast<size_t>(slot)]];
}

Tensor RecurrentStatePool::conv_state(size_t layer, int32_t slot) const {
  const Block& b = block_of(slot);
  if (!gdn_layers_.at(layer)) return {};
  return b.conv[layer].rows(slot - b.first, slot - b.first + 1).reshape(conv_shape_);
}

Tensor RecurrentStatePool::recurrent_state(size_t layer, int32_t slot) const {
  const Block& b = block_of(slot);
  if (!gdn_layers_.at(layer)) return {};
  return b.recurrent[layer].rows(slot - b.first, slot - b.first + 1).reshape(recurrent_shape_);
}

RecurrentSlot::RecurrentSlot(std::shared_ptr<RecurrentStatePool> pool, std::optional<int32_t> copy_of)
    : pool_(std::move(pool)) {
  PLUMB_CHECK(pool_ != nullptr, "recurrent slot: no pool");
  id_ = pool_->acquire(copy_of);
}

RecurrentSlot::RecurrentSlot(RecurrentSlot&& other) noexcept
    : pool_(std::move(other.pool_)), id_(std::exchange(other.id_, -1)) {}

RecurrentSlot& RecurrentSlot::operator=(RecurrentSlot&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::move(other.pool_);
    id_ = std::exchange(other.id_, -1);
  }
  return *this;
}

void RecurrentSlot::reset() {
  if (pool_ && id_ >= 0) pool_->release(id_);
  id_ = -1;
}

}  // namespace plumb
