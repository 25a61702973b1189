#include "model/state_hash.h"

#include "core/hash.h"
#include "model/kv_pages.h"

namespace plumb {

uint64_t tensor_hash(Backend& backend, const Tensor& t) {
  const Tensor host = t.device() == Device::kCpu ? t : backend.download(t);
  return fnv1a64(host.data(), host.nbytes());
}

std::vector<std::pair<std::string, uint64_t>> state_hashes(const Qwen3NextModel& model, const SequenceState& state) {
  Backend& be = model.backend();
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < state.layers.size(); ++i) {
    const LayerState& l = state.layers[i];
    const std::string layer = "layer" + std::to_string(i) + ".";
    if (l.recurrent_state.data()) {
      out.emplace_back(layer + "recurrent", tensor_hash(be, l.recurrent_state));
      out.emplace_back(layer + "conv", tensor_hash(be, l.conv_state));
    } else {
      const std::span<const int32_t> pages = state.kv_pages.ids();
      out.emplace_back(layer + "k", tensor_hash(be, gather_positions(be, model.kv_pool().k(i), pages, state.position)));
      out.emplace_back(layer + "v", tensor_hash(be, gather_positions(be, model.kv_pool().v(i), pages, state.position)));
    }
  }
  return out;
}

}  // namespace plumb
