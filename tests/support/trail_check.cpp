#include "support/trail_check.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "support/random.h"
#include "support/tensors.h"

namespace plumb::test {
namespace {

// Sequences of a verification-shaped batch: (tokens, past). The first crosses the window at 64; the last is a lone
// token, which keeps no trail.
const std::vector<std::pair<int64_t, int64_t>> kSequences = {{4, 62}, {9, 0}, {3, 127}, {2, 5}, {1, 40}};

// A host tensor of NaNs in the backend's memory: a trail state nothing wrote shows as a mismatch.
Tensor poisoned(Backend& be, const Shape& shape) {
  Tensor host = Tensor::zeros(DType::kF32, shape);
  for (int64_t i = 0; i < host.numel(); ++i) host.f32()[i] = std::numeric_limits<float>::quiet_NaN();
  return be.upload(host);
}

bool same(Backend& be, const Tensor& x, const Tensor& y) {
  const Tensor a = be.download(x), b = be.download(y);
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// One op of the check: its call over rows `rows` of the inputs, given the states and their trails.
using OpCall = std::function<void(const BatchRows& batch, int64_t row, int64_t rows, const std::vector<Tensor*>&,
                                  Tensor& out, const StateTrails&)>;

// Runs `op` batched with trails and one token a call, and compares.
void compare(Backend& be, const char* name, const Shape& state_shape, const Shape& out_row_shape,
             const std::vector<Tensor>& initial, const OpCall& op, std::vector<std::string>& mismatches) {
  BatchRows batch;
  int64_t rows = 0;
  for (const auto& [count, past] : kSequences) {
    batch.push_back({rows, count, past});
    rows += count;
  }
  Shape out_shape = out_row_shape;
  out_shape.insert(out_shape.begin(), rows);
  std::vector<Tensor> states, trail_storage;
  std::vector<Tensor*> state_ptrs;
  StateTrails trails(batch.size());
  for (const Tensor& s : initial) states.push_back(be.upload(clone(s)));  // clone: the CPU's upload shares
  for (Tensor& s : states) state_ptrs.push_back(&s);
  trail_storage.reserve(static_cast<size_t>(rows));
  for (size_t i = 0; i < batch.size(); ++i)
    for (int64_t t = 0; t + 1 < batch[i].count; ++t) {
      trail_storage.push_back(poisoned(be, state_shape));
      trails[i].push_back(&trail_storage.back());
    }
  Tensor out = poisoned(be, out_shape);
  op(batch, 0, rows, state_ptrs, out, trails);

  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceRows& seq = batch[i];
    Tensor alone = be.upload(clone(initial[i]));
    Shape one_shape = out_row_shape;
    one_shape.insert(one_shape.begin(), 1);
    for (int64_t t = 0; t < seq.count; ++t) {
      Tensor one = poisoned(be, one_shape);
      op({{0, 1, seq.past + t}}, seq.begin + t, 1, {&alone}, one, {});
      const std::string where = std::string(name) + " sequence " + std::to_string(i) + " token " + std::to_string(t);
      if (!same(be, one, out.rows(seq.begin + t, seq.begin + t + 1))) mismatches.push_back(where + ": output");
      const Tensor& kept = t + 1 < seq.count ? *trails[i][static_cast<size_t>(t)] : states[i];
      if (!same(be, alone, kept)) mismatches.push_back(where + (t + 1 < seq.count ? ": trail state" : ": state"));
    }
  }
}

}  // namespace

std::vector<std::string> trail_mismatches(Backend& be, int64_t dk, int64_t dv, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> mismatches;
  int64_t rows = 0;
  for (const auto& s : kSequences) rows += s.first;

  // The conv: C channels of K taps.
  const int64_t C = 40, K = 4;
  const Tensor x = be.upload(random_tensor(rng, {rows, C})), w = be.upload(random_tensor(rng, {C, K}, 0.5f));
  std::vector<Tensor> conv_initial;
  for (size_t i = 0; i < kSequences.size(); ++i) conv_initial.push_back(random_tensor(rng, {C, K - 1}));
  compare(
      be, "causal_conv1d_silu", {C, K - 1}, {C}, conv_initial,
      [&](const BatchRows& batch, int64_t row, int64_t n, const std::vector<Tensor*>& states, Tensor& y,
          const StateTrails& trails) { be.causal_conv1d_silu(x.rows(row, row + n), w, states, batch, y, trails); },
      mismatches);

  // The delta rule: two key heads, four value heads, gates of a trained model's range.
  const int64_t nk = 2, nv = 4;
  const Tensor qkv = be.upload(random_tensor(rng, {rows, 2 * nk * dk + nv * dv}));
  const Tensor a = be.upload(random_tensor(rng, {rows, nv})), b = be.upload(random_tensor(rng, {rows, nv}, 2.0f));
  const Tensor A_log = be.upload(random_tensor(rng, {nv}, 0.3f)), dt_bias = be.upload(random_tensor(rng, {nv}, 0.5f));
  std::vector<Tensor> gdn_initial;
  for (size_t i = 0; i < kSequences.size(); ++i)
    gdn_initial.push_back(random_tensor(rng, {nv, dk, dv}, 1.0f / std::sqrt(static_cast<float>(dk))));
  compare(
      be, "gated_delta_rule", {nv, dk, dv}, {nv, dv}, gdn_initial,
      [&](const BatchRows& batch, int64_t row, int64_t n, const std::vector<Tensor*>& states, Tensor& o,
          const StateTrails& trails) {
        be.gated_delta_rule(qkv.rows(row, row + n), nk, a.rows(row, row + n), b.rows(row, row + n), A_log, dt_bias,
                            states, batch, o, GdnAlgorithm::kRecurrent, trails);
      },
      mismatches);
  return mismatches;
}

}  // namespace plumb::test
