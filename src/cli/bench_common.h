// What plumb bench's parts (cmd_bench.cpp: decode and prefill; bench_speculative.cpp: speculative decoding) and the
// kernel benchmark (bench/kernels) share: the arguments, timing, the printed table and report, and the bytes a decode
// step must move.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/qwen3_next.h"
#include "model/synthetic_weights.h"
#include "ops/backend.h"

namespace plumb::cli::bench {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Long contexts are prefilled in pieces of this many tokens (a multiple of the GDN chunk) to bound activations.
constexpr int64_t kPrefillPiece = 8192;

struct BenchArgs {
  std::string device = "cpu", model, batches = "1,4,16,64", prefill = "4096,16384";
  std::string json_path, device_name, commit, weights = "bf16";
  bool synthetic = false, no_graphs = false, profile_last_step = false;
  bool skip_kernels = false;  // no effect: kernels are timed by plumb_kernel_bench (older command lines still parse)
  int64_t context = 32, steps = 20, warmup = 3, prefill_repeats = 3, copy_mib = 0;
  double tensor_rate_tflops = 0;
  uint64_t seed = kSyntheticSeed;
  TokenDraw draw;                   // every decode step's draw of each row (greedy unless --temperature)
  std::string speculative_tokens;   // draft tokens a step to time speculative steps at, comma-separated ("": none)
  double acceptance_length = 3.39;  // tokens a verifying step keeps on average (at most k + 1)
  int64_t draft_vocab = 0;          // above 0: speculative steps also timed drafting among the first ids alone
  std::string constrained;          // a tokenizer folder: also time steps whose draws keep to a JSON grammar over it
};

double median(std::vector<double> v);
double seconds_since(Clock::time_point start);
// Samples of `repeats` timings, each of `inner` back-to-back calls fn(0..inner-1) between synchronizations, divided
// by inner; one untimed pass first.
std::vector<double> time_calls(Backend& be, int64_t repeats, int64_t inner, const std::function<void(int64_t)>& fn);
Tensor random_tensor(Backend& be, DType dtype, const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

std::string human_time(double s);
std::string human_bytes(double b);
std::string human_flops(double f);
std::string bandwidth(double bytes_per_s);
std::string flop_rate(double flops_per_s);
std::string percent(double fraction);

// One line of the printed table.
struct Row {
  std::string what, shape, time, rate, work, floor, of_floor;
};
void print_table(const std::vector<Row>& rows);

// What the model's weights weigh, split the way a decode step reads them.
struct WeightCounts {
  double total_bytes = 0;          // every weight as allocated (a tied lm_head once)
  double dense_bytes = 0;          // read whole by every step: layer weights except routed experts, final norm, lm_head
  double expert_bytes = 0;         // one routed expert of one layer (gate, up, down)
  double embedding_row_bytes = 0;  // one row of embed_tokens
  double layer_matmul_params = 0;  // matrix parameters a token multiplies in its layers, routed experts excluded
  double expert_params = 0;        // one routed expert: 3·I·H
  double lm_head_params = 0;
  int64_t moe_layers = 0;
};
WeightCounts count_weights(const ModelConfig& c, const ModelWeights& w);

// Bytes one decode step of B sequences must move, each reading `positions` cached KV positions on average.
struct StepBytes {
  double dense = 0, experts = 0, experts_touched = 0, embedding = 0, recurrent = 0, conv = 0, kv = 0;
  double total() const { return dense + experts + embedding + recurrent + conv + kv; }
};
StepBytes decode_step_bytes(const ModelConfig& c, const WeightCounts& n, DType kv_dtype, int64_t B, double positions);
// Matrix-product FLOPs of one prefill of T tokens with last-row logits (cmd_bench.cpp says what is counted).
double prefill_flops(const ModelConfig& c, const WeightCounts& n, int64_t T);

struct Context {
  Context(const BenchArgs& a, Backend& b, const ModelConfig& c) : args(a), be(b), config(c) {
    if (a.tensor_rate_tflops > 0) tensor_rate = a.tensor_rate_tflops * 1e12;
  }
  const BenchArgs& args;
  Backend& be;
  const ModelConfig& config;
  double copy_bandwidth = 0;          // bytes/s, read + written
  std::optional<double> tensor_rate;  // FLOP/s: --tensor-rate-tflops, when given
  std::vector<Row> rows;
  json out;
};

// What --model, --weights and --device name. set_up() also checks, before the long run, that --tensor-rate-tflops is
// not negative and that --json can be written (a run must not end in an error that loses its figures).
struct BenchSetup {
  SyntheticConfig synthetic;
  SyntheticWeights weights;
  std::unique_ptr<Backend> backend;
};
BenchSetup set_up(const BenchArgs& a);

// Fills ctx.out's header (the benchmark's name, the model and its shapes, the weights' format, the device and its
// name (--device-name, else the GPU's or "cpu"), the time now in UTC, the commit) and prints the model and device.
void start_report(Context& ctx, const std::string& benchmark, const SyntheticConfig& synthetic,
                  SyntheticWeights weights);
// Writes `doc` to `path` (nothing when the path is empty) and says so.
void write_json(const std::string& path, const json& doc);

// A deterministic stream of token ids.
class TokenStream {
 public:
  explicit TokenStream(int64_t vocab, uint64_t seed) : vocab_(static_cast<uint64_t>(vocab)), x_(seed) {}
  int32_t next() {
    x_ = x_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>((x_ >> 33) % vocab_);
  }
  std::vector<int32_t> take(int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = next();
    return ids;
  }

 private:
  uint64_t vocab_, x_;
};

// The copy bandwidth every floor divides by: one device-to-device copy of --copy-mib, its median over 10.
void measure_copy(Context& ctx);
// Runs `count` tokens of one sequence through the model, in pieces.
void prefill(const Qwen3NextModel& model, SequenceState& state, TokenStream& tokens, int64_t count);
// Gives `to` the state of `from`: recurrent and conv states, and copies of the KV pages of its filled positions.
void clone_state(const Qwen3NextModel& model, const SequenceState& from, SequenceState& to);

}  // namespace plumb::cli::bench
