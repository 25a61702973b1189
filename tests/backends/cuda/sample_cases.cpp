// Harness case of sample_tokens, on random rows and on rows built so that the top-k and top-p cuts decide the pick:
// the GPU must pick the reference's token, except where the draw lands within rounding of a boundary (of the top-p
// cut or of a token's cumulative interval); there either neighbour is accepted, as decided by a double-precision
// transcription of the rule. docs/kernel-contract.md §Sampling.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "core/counter_rng.h"
#include "op_harness.h"

namespace plumb::harness {
namespace {

// Relative slack of the boundary test: F32 softmax sums over up to 152K terms on either backend.
constexpr double kSampleSlack = 1e-3;

// The tokens a correct F32 implementation may return for one row: a singleton unless the draw is ambiguous.
std::set<int32_t> acceptable_tokens(const float* logits, int64_t V, const TokenDraw& draw) {
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  // Softmax is monotone in the logit, so the logit order is the probability order, ties to the lower id.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (draw.temperature == 0.0f) return {order[0]};
  const int64_t kept = draw.top_k > 0 ? std::min(draw.top_k, V) : V;
  std::vector<double> cumulative(static_cast<size_t>(kept));
  double running = 0;
  for (int64_t i = 0; i < kept; ++i)
    cumulative[i] = running += std::exp((logits[order[i]] - static_cast<double>(logits[order[0]])) / draw.temperature);
  const double mass = running, tol = kSampleSlack * mass;
  // The top-p cut n: the fewest tokens whose mass reaches top_p of the kept mass; ambiguous within tol.
  int64_t n_lo = kept, n_hi = kept;
  for (int64_t i = kept; i-- > 0;) {
    if (cumulative[i] >= draw.top_p * mass - tol) n_lo = i + 1;
    if (cumulative[i] >= draw.top_p * mass + tol) n_hi = i + 1;
  }
  const double u = uniform_f32_from_counter(draw.seed, draw.step);
  std::set<int32_t> out;
  for (int64_t n = n_lo; n <= n_hi; ++n) {
    const double target = u * cumulative[n - 1];
    for (int64_t i = 0; i < n; ++i) {
      const double before = i ? cumulative[i - 1] : 0.0;
      if (before <= target + tol && cumulative[i] >= target - tol) out.insert(order[i]);
    }
  }
  return out;
}

// The GPU's pick for each row must be the reference's, or, where the draw is ambiguous and `exact` is false,
// another token the double-precision rule allows; then the rows alone must repeat the batch's picks.
void judge_draws(Context& c, const std::string& what, const Tensor& logits, const std::vector<TokenDraw>& draws,
                 bool exact = false) {
  const int64_t R = logits.dim(0), V = logits.dim(1);
  auto run = [&](Backend& be, int64_t begin, int64_t end) {
    Tensor ids = poisoned(be, DType::kI32, {end - begin});
    be.sample_tokens(be.upload(logits.rows(begin, end)),
                     std::vector<TokenDraw>(draws.begin() + begin, draws.begin() + end), ids);
    return be.download(ids);
  };
  const Tensor want = run(c.cpu, 0, R), got = run(c.gpu, 0, R);
  int64_t ambiguous = 0;
  std::vector<float> seen(static_cast<size_t>(V));  // [V] the row as its draw sees it: -inf where not allowed
  for (int64_t r = 0; r < R; ++r) {
    const int32_t g = got.data_as<int32_t>()[r], w = want.data_as<int32_t>()[r];
    for (int64_t i = 0; i < V; ++i)
      seen[i] = token_allowed(draws[r].allowed, i) ? logits.f32()[r * V + i] : -std::numeric_limits<float>::infinity();
    const std::set<int32_t> ok = acceptable_tokens(seen.data(), V, draws[r]);
    if (!token_allowed(draws[r].allowed, g))
      c.verdict.fail(what + " row " + std::to_string(r) + ": picked " + std::to_string(g) +
                     ", which it does not allow");
    ambiguous += ok.size() > 1;
    if (!ok.count(w))
      c.verdict.fail(what + " row " + std::to_string(r) + ": the reference picked " + std::to_string(w) +
                     ", which the double-precision rule does not allow");
    if (g != w && (exact || !(ok.size() > 1 && ok.count(g))))
      c.verdict.fail(what + " row " + std::to_string(r) + ": picked " + std::to_string(g) + ", reference " +
                     std::to_string(w) + " (temperature " + std::to_string(draws[r].temperature) + ", top_k " +
                     std::to_string(draws[r].top_k) + ", top_p " + std::to_string(draws[r].top_p) + ")");
  }
  std::printf("[ harness  ] %-48s %lld of %lld rows within rounding of a boundary\n", what.c_str(),
              static_cast<long long>(ambiguous), static_cast<long long>(R));
  check_rows_alone(c.verdict, what, got, [&](int64_t begin, int64_t end) { return run(c.gpu, begin, end); });
}

// Random logits under a mix of draws, with a tie for the maximum planted in every row.
void random_rows(Context& c, int64_t V) {
  for (int64_t R : {int64_t{1}, int64_t{3}, int64_t{64}}) {
    Tensor logits = normal(c.rng, {R, V}, 2.0f);
    std::vector<TokenDraw> draws(static_cast<size_t>(R));
    const TokenDraw kinds[] = {{0.0f, 0, 1.0f, 0, 0},  {0.7f, 20, 0.9f, 0, 0}, {1.0f, 0, 1.0f, 0, 0},
                               {1.3f, 0, 0.95f, 0, 0}, {0.6f, 1, 1.0f, 0, 0},  {1.0f, 50, 1.0f, 0, 0}};
    for (int64_t r = 0; r < R; ++r) {
      draws[r] = kinds[r % std::size(kinds)];
      draws[r].seed = c.rng();
      draws[r].step = c.rng() % 100000;
      // Plant a tie for the maximum at a higher id, so argmax and the order of equal logits are exercised.
      float* row = logits.f32() + r * V;
      const int64_t top = std::max_element(row, row + V) - row;
      row[(top + 1 + static_cast<int64_t>(c.rng() % (V - 1))) % V] = row[top];
    }
    judge_draws(c, "sample_tokens V=" + std::to_string(V) + " R=" + std::to_string(R), logits, draws);
  }
}

// Rows on which the top-k and top-p cuts decide the pick, far from any rounding boundary. Three likely tokens (random
// distinct ids) weigh 5 : 3 : 2 and every other token e^-40 of the first; u is drawn in [0.82, 0.95]. Rows 0-1 cut at
// top_p = 0.7, rows 2-3 at top_k = 2: either keeps the first two (running weights 0.5, 0.8, 1 of the total, so the
// cut is 0.1 from the next), and u · 0.8 in [0.656, 0.76] picks the second. Keeping one token fewer picks the first,
// one more (u · 1 in [0.82, 0.95]) the third. Rows 4-5 tie the first two for the maximum and keep top_k = 1: the lower
// id of the two. Every margin is at least 0.02 of the total weight, 20 times the rule's slack, so the reference's
// pick is the only token allowed.
void cut_rows(Context& c, int64_t V) {
  const int64_t R = 6;
  Tensor logits = Tensor::from_f32(std::vector<float>(static_cast<size_t>(R * V), -40.0f), {R, V});
  std::vector<TokenDraw> draws(static_cast<size_t>(R));
  std::uniform_int_distribution<int64_t> token(0, V - 1);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t first = token(c.rng);
    int64_t second = token(c.rng), third = token(c.rng);
    while (second == first) second = token(c.rng);
    while (third == first || third == second) third = token(c.rng);
    const bool tie = r >= 4;
    // Temperatures 1 and 0.7, the logits scaled by it so that the weights stay 5 : 3 : 2.
    const float temperature = r % 2 ? 0.7f : 1.0f;
    float* row = logits.f32() + r * V;
    row[first] = 0.0f;
    row[second] = tie ? 0.0f : temperature * std::log(0.6f);
    row[third] = temperature * std::log(0.4f);
    draws[r] = {temperature, r < 2 ? 0 : (tie ? 1 : 2), r < 2 ? 0.7f : 1.0f, c.rng(), c.rng() % 100000};
    while (true) {
      const float u = uniform_f32_from_counter(draws[r].seed, draws[r].step);
      if (u >= 0.82f && u <= 0.95f) break;
      ++draws[r].step;
    }
  }
  judge_draws(c, "sample_tokens cut rows V=" + std::to_string(V), logits, draws);
}

// Rows whose tokens all tie (every logit 0.25): they rank in id order and weigh the same, so the top-k cut, the
// top-p cut and the pick are token counts that both backends compute exactly, and the GPU must return the
// reference's token itself. The pick lands deep inside the tie, in any block of the row's part of the GPU, which
// the other cases never reach (their picks resolve to a key one token holds).
void tied_rows(Context& c, int64_t V) {
  const int64_t R = 4;
  const Tensor logits = Tensor::from_f32(std::vector<float>(static_cast<size_t>(R * V), 0.25f), {R, V});
  const TokenDraw kinds[] = {
      {1.0f, 0, 1.0f, 0, 0}, {0.7f, 0, 0.5f, 0, 0}, {1.0f, V / 3, 1.0f, 0, 0}, {1.3f, V / 2 + 1, 0.3f, 0, 0}};
  std::vector<TokenDraw> draws(std::begin(kinds), std::end(kinds));
  for (TokenDraw& draw : draws) draw.seed = c.rng(), draw.step = c.rng() % 100000;
  judge_draws(c, "sample_tokens tied rows V=" + std::to_string(V), logits, draws, true);
}

// Random logits whose draws allow some tokens only (structured output): a third of the tokens at random, one token
// (not the row's argmax), all but the argmax, one 32-token word, none but the last token, and every token through
// bits that allow all; under greedy and sampled draws, with and without unconstrained rows beside them.
void allowed_rows(Context& c, int64_t V) {
  const int64_t words = allowed_words(V), R = 14;
  Tensor logits = normal(c.rng, {R, V}, 2.0f);
  std::vector<std::vector<uint32_t>> bits(static_cast<size_t>(R), std::vector<uint32_t>(static_cast<size_t>(words)));
  std::vector<TokenDraw> draws(static_cast<size_t>(R));
  const TokenDraw kinds[] = {{0.0f, 0, 1.0f, 0, 0}, {0.8f, 0, 0.9f, 0, 0}};
  std::uniform_int_distribution<int64_t> token(0, V - 1);
  for (int64_t r = 0; r < R; ++r) {
    draws[r] = kinds[r % 2];
    draws[r].seed = c.rng();
    draws[r].step = c.rng() % 100000;
    if (r >= 12) continue;  // unconstrained rows among the others
    const float* row = logits.f32() + r * V;
    const int64_t top = std::max_element(row, row + V) - row;
    std::vector<uint32_t>& b = bits[static_cast<size_t>(r)];
    const auto allow = [&](int64_t t) { b[static_cast<size_t>(t / 32)] |= 1u << (t % 32); };
    switch (r / 2) {
      case 0:
        for (int64_t t = 0; t < V; ++t)
          if (c.rng() % 3 == 0) allow(t);
        break;
      case 1:
        allow(top == 0 ? V - 1 : top - 1);
        break;
      case 2:
        for (int64_t t = 0; t < V; ++t)
          if (t != top) allow(t);
        break;
      case 3:
        for (int64_t first = token(c.rng) / 32 * 32, t = first; t < std::min(V, first + 32); ++t) allow(t);
        break;
      case 4:
        allow(V - 1);
        break;
      default:
        for (int64_t t = 0; t < V; ++t) allow(t);
    }
    if (std::none_of(b.begin(), b.end(), [](uint32_t w) { return w != 0; })) allow(token(c.rng));
    draws[r].allowed = b.data();
  }
  judge_draws(c, "sample_tokens allowed tokens V=" + std::to_string(V), logits, draws);
}

// 7 and 4099 tokens: rows shorter than the GPU's blocks a row, and rows of no whole 16-byte vectors.
void sample_case(Context& c) {
  for (int64_t V : {int64_t{7}, int64_t{1000}, int64_t{4099}}) random_rows(c, V);
  cut_rows(c, 1000);
  tied_rows(c, 4099);
  for (int64_t V : {int64_t{7}, int64_t{4099}, int64_t{4100}}) allowed_rows(c, V);
}

// Qwen3's vocabulary. Apart from the others because racecheck, which runs every case but the large ones, would take
// minutes over it.
void sample_large_case(Context& c) {
  random_rows(c, 151936);
  cut_rows(c, 151936);
  tied_rows(c, 151936);
  allowed_rows(c, 248320);
}

const CaseRegistrar reg_sample("sample_tokens", sample_case);
const CaseRegistrar reg_sample_large("sample_tokens_large", sample_large_case);

const ControlRegistrar ctl_ties(cuda::KernelFault::kSampleTiesToHigher, "sample_tokens");
const ControlRegistrar ctl_top_p(cuda::KernelFault::kSampleTopPOneShort, "sample_tokens");
const ControlRegistrar ctl_allowed(cuda::KernelFault::kSampleIgnoresAllowed, "sample_tokens");

}  // namespace
}  // namespace plumb::harness
