// The op harness: every op of the Backend interface run on the CudaBackend and checked against the CpuBackend (the
// reference) on the same random inputs, within an error bound per element derived in docs/kernel-contract.md, plus
// bit-identity checks for batch invariance and determinism. Planted controls (cuda::KernelFault) run the same case
// functions with a fault set and must be rejected.
//
// A case is a function that builds its inputs from the harness's generator, runs the op on both backends and
// records every comparison in a Verdict; it never asserts by itself, so the same function judges the real kernel
// (the verdict must be clean) and its planted control (the verdict must not be).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/fault.h"
#include "core/tensor.h"
#include "support/tensors.h"

namespace plumb::harness {

// --- Error-bound constants (derivations in docs/kernel-contract.md) ---
// F32 unit roundoff: one correctly rounded F32 operation has relative error at most 2^-24.
inline constexpr double kF32Unit = 0x1.0p-24;
// A tensor-core operand rounded to BF16 to nearest: relative error at most 2^-8 (8 significant bits).
inline constexpr double kBf16Operand = 0x1.0p-8;
// Relative error allowed each transcendental (exp, log1p, rsqrt, sigmoid, sin/cos) on either backend: 8 F32 ulps,
// which covers CUDA's fast intrinsics (__expf: 2 + 1.16·|x| ulp) over the argument ranges the cases use.
inline constexpr double kTranscendental = 0x1.0p-20;

// The operand-rounding term of a matrix product with weights of `dtype`: BF16, FP8 and NVFP4 (E2M1) weights round the
// activation to BF16 (the quantized ones adding their multiplier's rounding); F32 (and F16, widened to F32 at upload)
// products stay in F32.
double operand_rounding(DType weight_dtype);
// |gpu − cpu| bound of one K-term dot product Σ x_k·w_k whose Σ |x_k·w_k| is abs_sum: operand rounding plus F32
// accumulation on the GPU (K·2^-23: each of K additions may truncate) and on the CPU (8 interleaved partial sums).
double dot_bound(int64_t K, double abs_sum, DType weight_dtype);

// --- The record of one case run ---
class Verdict {
 public:
  // got (downloaded from the GPU, F32) against want (the reference, F32) within bound[i] per element. Fails on any
  // element with !(|got − want| <= bound) (so NaN fails) or a non-finite got or want.
  void close(const std::string& what, const Tensor& got, const Tensor& want, const std::vector<double>& bound);
  // Requires identical bytes (batch invariance, determinism, exact copies, token ids).
  void same_bits(const std::string& what, const Tensor& a, const Tensor& b);
  void fail(const std::string& message);

  bool ok() const { return failures_.empty(); }
  double worst_ratio() const { return worst_ratio_; }
  const std::string& worst_what() const { return worst_what_; }
  // Every failure, one per line.
  std::string report() const;

 private:
  std::vector<std::string> failures_;
  double worst_ratio_ = 0.0;
  std::string worst_what_;
};

// --- What a case works with ---
struct Context {
  CudaBackend& gpu;
  CpuBackend& cpu;
  std::mt19937_64& rng;
  Verdict verdict;
};
using CaseFn = std::function<void(Context&)>;

struct Case {
  std::string name;  // gtest-safe: letters, digits, underscores
  CaseFn run;
};
struct Control {
  cuda::KernelFault fault;
  std::string case_name;  // the registered case it runs
  int repetitions;        // > 1 for races: rejected if any repetition is rejected
};

std::vector<Case>& cases();
std::vector<Control>& controls();
const Case* find_case(const std::string& name);
// Static registration from the case files (one registrar object per case or control).
struct CaseRegistrar {
  CaseRegistrar(std::string name, CaseFn run);
};
struct ControlRegistrar {
  ControlRegistrar(cuda::KernelFault fault, std::string case_name, int repetitions = 1);
};

// Every planted fault of fault.h, with its name.
const std::vector<cuda::KernelFault>& all_faults();
const char* fault_name(cuda::KernelFault fault);

// --- Seeds ---
// The run's seed: PLUMB_HARNESS_SEED when set (replay), else fresh from std::random_device; fixed for the process.
uint64_t run_seed();
// A test's generator seed, derived from the run seed and the test's name (so tests replay independently).
uint64_t case_seed(const std::string& name);
// "seed S (replay with PLUMB_HARNESS_SEED=S)" for failure messages.
std::string seed_note();

// --- Tensors ---
// A host copy with its own memory (the CPU backend's upload shares memory with the host tensor).
using test::clone;
// Host F32 tensor of N(0, scale) values.
Tensor normal(std::mt19937_64& rng, const Shape& shape, float scale = 1.0f);
// Host F32 tensor of U(lo, hi) values.
Tensor uniform(std::mt19937_64& rng, const Shape& shape, float lo, float hi);
using test::bf16_exact;
using test::to_dtype;
using test::to_f32;
// An output for `be` filled with NaN bytes (0xFF), so an element the op leaves unwritten fails its check.
Tensor poisoned(Backend& be, DType dtype, const Shape& shape);
// be.upload of a private copy of `host` (safe for ops that write their argument in place).
Tensor fresh(Backend& be, const Tensor& host);
// An F32 host copy of a backend tensor (F32 or BF16).
Tensor fetch_f32(Backend& be, const Tensor& t);

// --- linear's launch variants ---
// Pins every later linear of `gpu` to one launch variant for its lifetime, and always unpins it again.
class LinearVariantScope {
 public:
  LinearVariantScope(CudaBackend& gpu, const cuda::LinearVariant& variant) : gpu_(gpu) {
    gpu_.set_linear_variant(variant);
  }
  ~LinearVariantScope() { gpu_.set_linear_variant(std::nullopt); }
  LinearVariantScope(const LinearVariantScope&) = delete;
  LinearVariantScope& operator=(const LinearVariantScope&) = delete;

 private:
  CudaBackend& gpu_;
};
// "stream8 register ring x2 warps split 2" and the like, for failure messages.
std::string linear_variant_label(const cuda::LinearVariant& v);

// --- Shared checks ---
// Row invariance and determinism of a per-row op: run(begin, end) runs the op on rows [begin, end) of its inputs
// alone and returns the host output; each of a few row ranges must equal those rows of `full` bit for bit, and a
// second full run must equal the first.
void check_rows_alone(Verdict& v, const std::string& what, const Tensor& full,
                      const std::function<Tensor(int64_t, int64_t)>& run);
// The usual judgement of a per-row op: run(be, begin, end) runs it on rows [begin, end) of its inputs on `be` and
// returns the F32 host output. Compares the GPU's rows [0, T) with the CPU's within `bound`, then check_rows_alone.
void judge_per_row(Context& c, const std::string& what, int64_t T, const std::vector<double>& bound,
                   const std::function<Tensor(Backend&, int64_t, int64_t)>& run);
// What a per-sequence op leaves: its token-major output and, per sequence, `states_per_sequence` host tensors
// (recurrent states, caches), sequence after sequence.
struct SequenceOutputs {
  Tensor rows;
  std::vector<Tensor> states;
};
// Batch invariance and determinism of a per-sequence op: alone(i) runs sequence i of `batch` by itself (its rows
// and its state only); its rows and states must equal those of `full` bit for bit, for every sequence of small
// batches and a spread of them in large ones. again() reruns the whole batch, which must repeat `full` exactly.
void check_sequences_alone(Verdict& v, const std::string& what, const BatchRows& batch, const SequenceOutputs& full,
                           const std::function<SequenceOutputs(size_t)>& alone,
                           const std::function<SequenceOutputs()>& again);
// The host inputs of one call of a per-sequence op, and the same call for sequence i alone.
struct SeqInputs {
  std::vector<Tensor> rows;    // token-major inputs, rows stacked sequence after sequence
  std::vector<Tensor> params;  // shared by every sequence (weights, gate parameters)
  std::vector<Tensor> states;  // states_per_sequence per sequence, sequence after sequence
  BatchRows batch;
  size_t states_per_sequence = 1;

  SeqInputs alone(size_t i) const;
};
// Runs the op on a backend: uploads private copies of the states, poisons the outputs, returns host F32 results.
using SeqOp = std::function<SequenceOutputs(Backend&, const SeqInputs&)>;
// The common judgement of a per-sequence op: GPU against CPU within rows_bound and (unless state_bounds is empty)
// each state within its bound, then check_sequences_alone. Returns the GPU's outputs for further checks.
SequenceOutputs judge_sequences(Context& c, const std::string& what, const SeqInputs& in, const SeqOp& op,
                                const std::vector<double>& rows_bound,
                                const std::vector<std::vector<double>>& state_bounds);
// Cutting `whole`'s one sequence (batch {{0, n, past}}) into calls of counts[0], counts[1], ... tokens (summing to
// n), each call's states those the call before left, must reproduce one call bit for bit: every row and the final
// states. judge_split is the cut 64 + 128 of a 192-token sequence.
void judge_chunks(Context& c, const std::string& what, const SeqInputs& whole, const SeqOp& op,
                  const std::vector<int64_t>& counts);
void judge_split(Context& c, const std::string& what, const SeqInputs& whole, const SeqOp& op);
// The batches every per-sequence case runs: single sequences of 1, 63, 64, 65 and 1000 tokens (odd ones with a
// past of 37), a ragged batch of 3 with pasts, and a ragged batch of 64 (a third of them decoding one token).
std::vector<BatchRows> standard_batches(std::mt19937_64& rng);
std::string batch_label(const BatchRows& batch);

// Ragged per-sequence batches of `sequences` sequences (counts and pasts drawn from rng; rows stacked in order).
BatchRows ragged_batch(std::mt19937_64& rng, int64_t sequences, int64_t max_count, int64_t max_past);
int64_t batch_tokens(const BatchRows& batch);

// Prints one line for the log: the case's worst error/bound ratio.
void print_margin(const std::string& case_name, const Verdict& v);

}  // namespace plumb::harness
