#include "op_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace plumb::harness {

double operand_rounding(DType weight_dtype) {
  if (weight_dtype == DType::kBF16) return kBf16Operand;
  // FP8 and NVFP4 (E2M1): the GPU's BF16 activations, its product of each slice's partial sum with the multiplier and
  // the reference's product of each weight with it (one rounding each, relative to |x·w|; the weights before their
  // multiplier are exact in BF16 and F32 alike).
  if (weight_dtype == DType::kF8E4M3 || weight_dtype == DType::kE2M1) return kBf16Operand + 2 * kF32Unit;
  return 0.0;
}

double dot_bound(int64_t K, double abs_sum, DType weight_dtype) {
  const double gpu_accumulation = static_cast<double>(K + 2) * 2.0 * kF32Unit;
  const double cpu_accumulation = static_cast<double>(K / 8 + 4) * kF32Unit;
  return (operand_rounding(weight_dtype) + gpu_accumulation + cpu_accumulation) * abs_sum;
}

namespace {

std::string format_double(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// "[i, j, k]" of flat index `i` in `shape`.
std::string index_str(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

}  // namespace

void Verdict::close(const std::string& what, const Tensor& got, const Tensor& want, const std::vector<double>& bound) {
  if (got.numel() != want.numel() || static_cast<int64_t>(bound.size()) != want.numel() || got.dtype() != DType::kF32 ||
      want.dtype() != DType::kF32) {
    fail(what + ": mismatched comparison (got " + shape_str(got.shape()) + ", want " + shape_str(want.shape()) + ")");
    return;
  }
  const float* g = got.f32();
  const float* w = want.f32();
  int64_t bad = 0, first_bad = -1, worst = -1;
  double worst_ratio = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double err = std::fabs(static_cast<double>(g[i]) - static_cast<double>(w[i]));
    const bool finite = std::isfinite(g[i]) && std::isfinite(w[i]);
    const double ratio = err == 0.0 ? 0.0 : err / bound[i];  // inf when bound is 0, NaN when err is
    if (!finite || !(err <= bound[i])) {
      if (bad++ == 0) first_bad = i;
    }
    if (!(ratio <= worst_ratio)) {
      worst_ratio = std::isnan(ratio) ? INFINITY : ratio;
      worst = i;
    }
  }
  if (!(worst_ratio <= worst_ratio_)) {
    worst_ratio_ = worst_ratio;
    worst_what_ = what;
  }
  std::printf("[ harness  ] %-48s worst err/bound %-9s", what.c_str(), format_double(worst_ratio).c_str());
  if (worst >= 0)
    std::printf(" at %s (got %s, want %s, bound %s)", index_str(worst, want.shape()).c_str(),
                format_double(g[worst]).c_str(), format_double(w[worst]).c_str(), format_double(bound[worst]).c_str());
  std::printf("\n");
  if (bad) {
    fail(what + ": " + std::to_string(bad) + " of " + std::to_string(want.numel()) + " elements out of bound; first " +
         index_str(first_bad, want.shape()) + " got " + format_double(g[first_bad]) + " want " +
         format_double(w[first_bad]) + " bound " + format_double(bound[first_bad]) + "; worst err/bound " +
         format_double(worst_ratio) + " at " + index_str(worst, want.shape()));
  }
}

void Verdict::same_bits(const std::string& what, const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes() || a.dtype() != b.dtype()) {
    fail(what + ": not bit-identical (" + std::string(dtype_name(a.dtype())) + " " + shape_str(a.shape()) + " vs " +
         std::string(dtype_name(b.dtype())) + " " + shape_str(b.shape()) + ")");
    return;
  }
  if (std::memcmp(a.data(), b.data(), a.nbytes()) == 0) return;
  const size_t es = dtype_size(a.dtype());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(static_cast<const char*>(a.data()) + i * es, static_cast<const char*>(b.data()) + i * es, es)) {
      if (bad++ == 0) first = i;
    }
  std::string values;
  if (a.dtype() == DType::kF32)
    values = " (" + format_double(a.f32()[first]) + " vs " + format_double(b.f32()[first]) + ")";
  else if (a.dtype() == DType::kI32)
    values =
        " (" + std::to_string(a.data_as<int32_t>()[first]) + " vs " + std::to_string(b.data_as<int32_t>()[first]) + ")";
  fail(what + ": not bit-identical, " + std::to_string(bad) + " of " + std::to_string(a.numel()) +
       " elements differ; first " + index_str(first, a.shape()) + values);
}

void Verdict::fail(const std::string& message) {
  failures_.push_back(message);
}

std::string Verdict::report() const {
  std::string s;
  for (const std::string& f : failures_) s += "  " + f + "\n";
  return s;
}

// --- Registry ---

std::vector<Case>& cases() {
  static std::vector<Case> registry;
  return registry;
}

std::vector<Control>& controls() {
  static std::vector<Control> registry;
  return registry;
}

const Case* find_case(const std::string& name) {
  for (const Case& c : cases())
    if (c.name == name) return &c;
  return nullptr;
}

CaseRegistrar::CaseRegistrar(std::string name, CaseFn run) {
  cases().push_back({std::move(name), std::move(run)});
}

ControlRegistrar::ControlRegistrar(cuda::KernelFault fault, std::string case_name, int repetitions) {
  controls().push_back({fault, std::move(case_name), repetitions});
}

const std::vector<cuda::KernelFault>& all_faults() {
  static const std::vector<cuda::KernelFault> faults = {
#define PLUMB_FAULT_VALUE(name) cuda::KernelFault::name,
      PLUMB_KERNEL_FAULTS(PLUMB_FAULT_VALUE)
#undef PLUMB_FAULT_VALUE
  };
  return faults;
}

const char* fault_name(cuda::KernelFault fault) {
  switch (fault) {
    case cuda::KernelFault::kNone:
      return "None";
#define PLUMB_FAULT_NAME(name)  \
  case cuda::KernelFault::name: \
    return &#name[1];  // without its k
      PLUMB_KERNEL_FAULTS(PLUMB_FAULT_NAME)
#undef PLUMB_FAULT_NAME
  }
  return "Unknown";
}

// --- Seeds ---

uint64_t run_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("PLUMB_HARNESS_SEED"))
      return static_cast<uint64_t>(std::strtoull(env, nullptr, 0));
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  return seed;
}

uint64_t case_seed(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name, mixed with the run seed
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h ^ (run_seed() * 0x9e3779b97f4a7c15ull);
}

std::string seed_note() {
  return "seed " + std::to_string(run_seed()) + " (replay with PLUMB_HARNESS_SEED=" + std::to_string(run_seed()) + ")";
}

// --- Tensors ---

Tensor normal(std::mt19937_64& rng, const Shape& shape, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& v : values) v = dist(rng);
  return Tensor::from_f32(values, shape);
}

Tensor uniform(std::mt19937_64& rng, const Shape& shape, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& v : values) v = dist(rng);
  return Tensor::from_f32(values, shape);
}

Tensor poisoned(Backend& be, DType dtype, const Shape& shape) {
  Tensor host = Tensor::zeros(dtype, shape);
  std::memset(host.data(), 0xFF, host.nbytes());
  return be.upload(host);
}

Tensor fresh(Backend& be, const Tensor& host) {
  return be.upload(clone(host));
}

Tensor fetch_f32(Backend& be, const Tensor& t) {
  return to_f32(be.download(t));
}

// --- Shared checks ---

void check_rows_alone(Verdict& v, const std::string& what, const Tensor& full,
                      const std::function<Tensor(int64_t, int64_t)>& run) {
  const int64_t T = full.dim(0);
  std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 1}, {T - 1, T}};
  if (T > 2) ranges.push_back({T / 3, std::min(T, T / 3 + 5)});
  for (const auto& [begin, end] : ranges) {
    const Tensor alone = run(begin, end);
    v.same_bits(what + " rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") alone vs in " +
                    std::to_string(T) + " rows",
                alone, clone(full.rows(begin, end)));
  }
  v.same_bits(what + " second run", run(0, T), full);
}

void judge_per_row(Context& c, const std::string& what, int64_t T, const std::vector<double>& bound,
                   const std::function<Tensor(Backend&, int64_t, int64_t)>& run) {
  const Tensor want = run(c.cpu, 0, T);
  const Tensor got = run(c.gpu, 0, T);
  c.verdict.close(what, got, want, bound);
  check_rows_alone(c.verdict, what, got, [&](int64_t begin, int64_t end) { return run(c.gpu, begin, end); });
}

void check_sequences_alone(Verdict& v, const std::string& what, const BatchRows& batch, const SequenceOutputs& full,
                           const std::function<SequenceOutputs(size_t)>& alone,
                           const std::function<SequenceOutputs()>& again) {
  const size_t n = batch.size(), per = full.states.size() / n;
  for (size_t i = 0; i < n; ++i) {
    if (n > 8 && i % 7 != 1 && i + 1 != n) continue;  // a spread of a large batch: decode and prefill rows, the last
    const SequenceOutputs out = alone(i);
    const std::string name = what + " sequence " + std::to_string(i) + " of " + std::to_string(n) + " alone";
    v.same_bits(name + " rows", out.rows, clone(full.rows.rows(batch[i].begin, batch[i].begin + batch[i].count)));
    for (size_t s = 0; s < per; ++s)
      v.same_bits(name + " state " + std::to_string(s), out.states.at(s), full.states[i * per + s]);
  }
  const SequenceOutputs second = again();
  v.same_bits(what + " second run rows", second.rows, full.rows);
  for (size_t s = 0; s < full.states.size(); ++s)
    v.same_bits(what + " second run state " + std::to_string(s), second.states.at(s), full.states[s]);
}

SeqInputs SeqInputs::alone(size_t i) const {
  const SequenceRows s = batch[i];
  SeqInputs in{{}, params, {}, {{0, s.count, s.past}}, states_per_sequence};
  for (const Tensor& r : rows) in.rows.push_back(r.rows(s.begin, s.begin + s.count));
  for (size_t k = 0; k < states_per_sequence; ++k) in.states.push_back(states[i * states_per_sequence + k]);
  return in;
}

SequenceOutputs judge_sequences(Context& c, const std::string& what, const SeqInputs& in, const SeqOp& op,
                                const std::vector<double>& rows_bound,
                                const std::vector<std::vector<double>>& state_bounds) {
  const SequenceOutputs want = op(c.cpu, in), got = op(c.gpu, in);
  c.verdict.close(what + " output", got.rows, want.rows, rows_bound);
  for (size_t i = 0; i < state_bounds.size(); ++i)
    c.verdict.close(what + " state " + std::to_string(i), got.states[i], want.states[i], state_bounds[i]);
  check_sequences_alone(
      c.verdict, what, in.batch, got, [&](size_t i) { return op(c.gpu, in.alone(i)); }, [&] { return op(c.gpu, in); });
  return got;
}

void judge_chunks(Context& c, const std::string& what, const SeqInputs& whole, const SeqOp& op,
                  const std::vector<int64_t>& counts) {
  const SequenceRows seq = whole.batch.at(0);
  std::string label = what + " ";
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    label += (i ? " + " : "") + std::to_string(counts[i]);
    total += counts[i];
  }
  PLUMB_CHECK(total == seq.count, "judge_chunks: the cuts cover {} of the sequence's {} tokens", total, seq.count);
  label += " vs " + std::to_string(seq.count);
  const SequenceOutputs one = op(c.gpu, whole);
  std::vector<Tensor> states = whole.states;
  int64_t begin = 0;
  for (const int64_t count : counts) {
    const int64_t end = begin + count;
    SeqInputs part = whole;
    part.batch = {{0, count, seq.past + begin}};
    for (size_t r = 0; r < whole.rows.size(); ++r) part.rows[r] = whole.rows[r].rows(begin, end);
    part.states = states;
    const SequenceOutputs got = op(c.gpu, part);
    states = got.states;
    c.verdict.same_bits(label + " rows [" + std::to_string(begin) + ", " + std::to_string(end) + ")", got.rows,
                        clone(one.rows.rows(begin, end)));
    begin = end;
  }
  for (size_t i = 0; i < one.states.size(); ++i)
    c.verdict.same_bits(label + " state " + std::to_string(i), states[i], one.states[i]);
}

void judge_split(Context& c, const std::string& what, const SeqInputs& whole, const SeqOp& op) {
  judge_chunks(c, what, whole, op, {64, 128});
}

std::vector<BatchRows> standard_batches(std::mt19937_64& rng) {
  std::vector<BatchRows> out;
  for (int64_t T : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000}})
    out.push_back({{0, T, T % 2 ? 37 : 0}});
  out.push_back({{0, 1, 5}, {1, 65, 64}, {66, 130, 0}});
  out.push_back(ragged_batch(rng, 64, 20, 300));
  return out;
}

std::string batch_label(const BatchRows& batch) {
  if (batch.size() == 1) return "T=" + std::to_string(batch[0].count) + " past=" + std::to_string(batch[0].past);
  return std::to_string(batch.size()) + " sequences, T=" + std::to_string(batch_tokens(batch));
}

BatchRows ragged_batch(std::mt19937_64& rng, int64_t sequences, int64_t max_count, int64_t max_past) {
  std::uniform_int_distribution<int64_t> count(1, max_count), past(0, max_past);
  BatchRows batch;
  int64_t begin = 0;
  for (int64_t i = 0; i < sequences; ++i) {
    // A third of the sequences decode a single token, as continuous batching mixes them with prefill chunks.
    const int64_t c = i % 3 == 1 ? 1 : count(rng);
    batch.push_back({begin, c, i == 0 ? std::max<int64_t>(1, past(rng)) : past(rng)});
    begin += c;
  }
  return batch;
}

int64_t batch_tokens(const BatchRows& batch) {
  int64_t n = 0;
  for (const SequenceRows& s : batch) n += s.count;
  return n;
}

void print_margin(const std::string& case_name, const Verdict& v) {
  std::printf("[ margin   ] %s: worst err/bound %s (%s)\n", case_name.c_str(), format_double(v.worst_ratio()).c_str(),
              v.worst_what().empty() ? "no bounded comparison" : v.worst_what().c_str());
}

std::string linear_variant_label(const cuda::LinearVariant& v) {
  std::string label = cuda::linear_shape_name(v.shape);
  if (v.stream_kernel == cuda::LinearStreamKernel::kSharedRing) label += " shared-memory ring";
  if (v.stream_kernel == cuda::LinearStreamKernel::kRegisterRing)
    label += " register ring x" + std::to_string(v.stream_warps) + " warps";
  if (v.k_split == cuda::kLinearSplitEverySlice) {
    label += " split by slice";
  } else if (v.k_split > 1) {
    label += " split " + std::to_string(v.k_split);
  }
  return label;
}

}  // namespace plumb::harness
