// Harness cases of the dense family: embedding, the norms, slice_columns, the elementwise ops, random_uniform and
// copy_all.
// Every case runs T = 1, 63, 64, 65 and 1000 rows; bounds per docs/kernel-contract.md §Dense.
#include <cmath>

#include "op_harness.h"

namespace plumb::harness {
namespace {

constexpr int64_t kRowCounts[] = {1, 63, 64, 65, 1000};

std::string label(const char* op, int64_t T, int64_t D) {
  return std::string(op) + " T=" + std::to_string(T) + " D=" + std::to_string(D);
}

double silu(double z) {
  return z / (1.0 + std::exp(-z));
}
double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

// Elementwise ops with one transcendental: a few roundings plus the transcendental, relative to the result.
constexpr double kElementwiseRel = 4 * kF32Unit + 2 * kTranscendental;

// The norms' relative bound: the sum of squares over D terms (D·u on the GPU, D/8·u on the CPU) enters through a
// square root (halving it), then rsqrt and up to four products; taken as (D + 16)·u plus the transcendental twice.
double norm_rel(int64_t D) {
  return static_cast<double>(D + 16) * kF32Unit + 2 * kTranscendental;
}

// 1 / sqrt(mean(x²) + eps) of row r, in double.
double inv_rms(const float* x, int64_t D, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * x[i];
  return 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
}

void embedding_case(Context& c, DType dtype) {
  const int64_t V = 1003, H = 77;
  // One guard row past the table, so a kernel reading row id + 1 reads memory that exists instead of faulting.
  const Tensor stored = to_dtype(normal(c.rng, {V + 1, H}), dtype);
  for (int64_t T : kRowCounts) {
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(V - 1));
    std::vector<int32_t> ids(static_cast<size_t>(T));
    for (int32_t& i : ids) i = id(c.rng);
    ids.back() = static_cast<int32_t>(V - 1);  // the last row of the table
    ids.front() = 0;
    // The ids from the host, or already in the backend's memory (a previous step's draws).
    for (const bool ids_in_backend : {false, true}) {
      auto run = [&](Backend& be, int64_t begin, int64_t end) {
        const Tensor table = be.upload(stored).rows(0, V);
        Tensor out = poisoned(be, DType::kF32, {end - begin, H});
        std::vector<int32_t> part(ids.begin() + begin, ids.begin() + end);
        if (ids_in_backend)
          be.embedding(table, fresh(be, Tensor(DType::kI32, {end - begin}, Device::kCpu, part.data(), nullptr)), out);
        else
          be.embedding(table, part, out);
        return fetch_f32(be, out);
      };
      // A copy: exact, whatever the table's dtype.
      judge_per_row(c,
                    label("embedding", T, H) + " " + std::string(dtype_name(dtype)) +
                        (ids_in_backend ? " ids on the device" : ""),
                    T, std::vector<double>(static_cast<size_t>(T * H), 0.0), run);
    }
  }
  // Ids in device memory that lie outside the table, which the GPU cannot report: their rows are NaN, the others
  // copied (the CPU, which can see them, refuses them).
  std::vector<int32_t> bad{-1, static_cast<int32_t>(V), 5};
  const Tensor table = c.gpu.upload(stored).rows(0, V);
  Tensor out = poisoned(c.gpu, DType::kF32, {3, H});
  c.gpu.embedding(table, fresh(c.gpu, Tensor(DType::kI32, {3}, Device::kCpu, bad.data(), nullptr)), out);
  const Tensor got = fetch_f32(c.gpu, out);
  for (int64_t i = 0; i < 2 * H; ++i)
    if (!std::isnan(got.f32()[i])) c.verdict.fail("embedding: an id outside the table did not give a NaN row");
  c.verdict.same_bits("embedding: the row after two ids outside the table", got.rows(2, 3), to_f32(stored).rows(5, 6));
  Tensor cpu_out = Tensor::zeros(DType::kF32, {3, H});
  try {
    c.cpu.embedding(to_f32(stored).rows(0, V), Tensor(DType::kI32, {3}, Device::kCpu, bad.data(), nullptr), cpu_out);
    c.verdict.fail("embedding: the CPU took ids outside the table");
  } catch (const Error&) {
  }
}

// Row lengths of the norm cases: a warp's rows (77, 256: kept in registers; 1001: past the four chunks a lane keeps,
// read again after the reduction) and a block's (2048 kept; 4100 read again); 77 and 1001 element by element.
constexpr int64_t kNormDims[] = {77, 256, 1001, 2048, 4100};

void rms_norm_case(Context& c, NormWeight kind) {
  for (int64_t D : kNormDims) {
    const Tensor w = kind == NormWeight::kZeroCentred ? normal(c.rng, {D}, 0.3f) : uniform(c.rng, {D}, 0.5f, 1.5f);
    const double offset = kind == NormWeight::kZeroCentred ? 1.0 : 0.0;
    for (int64_t T : kRowCounts) {
      const Tensor x = normal(c.rng, {T, D});
      std::vector<double> bound(static_cast<size_t>(T * D));
      for (int64_t r = 0; r < T; ++r) {
        const double inv = inv_rms(x.f32() + r * D, D, 1e-6f);
        for (int64_t i = 0; i < D; ++i)
          bound[r * D + i] = norm_rel(D) * std::fabs(x.f32()[r * D + i] * inv * (offset + w.f32()[i]));
      }
      auto run = [&](Backend& be, int64_t begin, int64_t end) {
        Tensor y = poisoned(be, DType::kF32, {end - begin, D});
        be.rms_norm(be.upload(x.rows(begin, end)), be.upload(w), 1e-6f, kind, y);
        return fetch_f32(be, y);
      };
      judge_per_row(c, label(kind == NormWeight::kZeroCentred ? "rms_norm zero-centred" : "rms_norm plain", T, D), T,
                    bound, run);
    }
  }
}

// The residual step add_rms_norm must leave x and y with the bytes of add then rms_norm on the GPU, and y within
// rms_norm's bound of the CPU reference's step (whose sum is the same F32 add, so both norm the same x + r).
void add_rms_norm_case(Context& c) {
  for (int64_t D : kNormDims) {
    const Tensor w = normal(c.rng, {D}, 0.3f);
    for (int64_t T : kRowCounts) {
      const Tensor x = normal(c.rng, {T, D}), r = normal(c.rng, {T, D});
      const std::string what = label("add_rms_norm", T, D);
      // Returns {x after, y}.
      auto run = [&](Backend& be, bool fused) {
        Tensor device_x = fresh(be, x);
        const Tensor device_r = be.upload(r);
        const Tensor device_w = be.upload(w);
        Tensor y = poisoned(be, DType::kF32, {T, D});
        if (fused) {
          be.add_rms_norm(device_x, device_r, device_w, 1e-6f, NormWeight::kZeroCentred, y);
        } else {
          be.add(device_x, device_r);
          be.rms_norm(device_x, device_w, 1e-6f, NormWeight::kZeroCentred, y);
        }
        return std::pair{fetch_f32(be, device_x), fetch_f32(be, y)};
      };
      const auto [sum, y] = run(c.gpu, true);
      const auto [unfused_sum, unfused_y] = run(c.gpu, false);
      c.verdict.same_bits(what + " x + r vs add", sum, unfused_sum);
      c.verdict.same_bits(what + " y vs add then rms_norm", y, unfused_y);
      const auto [cpu_sum, cpu_y] = run(c.cpu, true);
      c.verdict.same_bits(what + " x + r vs the CPU's", sum, cpu_sum);
      std::vector<double> bound(static_cast<size_t>(T * D));
      for (int64_t row = 0; row < T; ++row) {
        const double inv = inv_rms(cpu_sum.f32() + row * D, D, 1e-6f);
        for (int64_t i = 0; i < D; ++i)
          bound[row * D + i] = norm_rel(D) * std::fabs(cpu_sum.f32()[row * D + i] * inv * (1.0 + w.f32()[i]));
      }
      c.verdict.close(what + " y", y, cpu_y, bound);
    }
  }
}

// The MoE block's residual step add_gated_branch_rms_norm must leave x and y with the bytes of mul_sigmoid_rows, add
// and add_rms_norm on the GPU, and r and the branch as they were. Against the CPU reference's step: x within the
// bound of sigmoid(g) (the CPU's std::exp against the GPU's expf, then three roundings), y within rms_norm's bound plus
// x's error carried through the norm.
void add_gated_branch_rms_norm_case(Context& c) {
  for (int64_t D : kNormDims) {
    const Tensor w = normal(c.rng, {D}, 0.3f);
    for (int64_t T : kRowCounts) {
      const Tensor x = normal(c.rng, {T, D}), r = normal(c.rng, {T, D}), s = normal(c.rng, {T, D});
      const Tensor g = normal(c.rng, {T, 1}, 2.0f);
      const std::string what = label("add_gated_branch_rms_norm", T, D);
      struct After {
        Tensor x, y, r, branch;
      };
      auto run = [&](Backend& be, bool fused) {
        Tensor device_x = fresh(be, x), device_r = fresh(be, r), device_s = fresh(be, s);
        const Tensor device_g = be.upload(g), device_w = be.upload(w);
        Tensor y = poisoned(be, DType::kF32, {T, D});
        if (fused) {
          be.add_gated_branch_rms_norm(device_x, device_r, GatedBranch{device_s, device_g}, device_w, 1e-6f,
                                       NormWeight::kZeroCentred, y);
        } else {
          be.mul_sigmoid_rows(device_s, device_g);
          be.add(device_r, device_s);
          be.add_rms_norm(device_x, device_r, device_w, 1e-6f, NormWeight::kZeroCentred, y);
        }
        return After{fetch_f32(be, device_x), fetch_f32(be, y), fetch_f32(be, device_r), fetch_f32(be, device_s)};
      };
      const After gpu = run(c.gpu, true), unfused = run(c.gpu, false), cpu = run(c.cpu, true);
      c.verdict.same_bits(what + " x vs the unfused ops", gpu.x, unfused.x);
      c.verdict.same_bits(what + " y vs the unfused ops", gpu.y, unfused.y);
      c.verdict.same_bits(what + " r untouched", gpu.r, r);
      c.verdict.same_bits(what + " branch untouched", gpu.branch, s);
      std::vector<double> x_bound(static_cast<size_t>(T * D)), y_bound(static_cast<size_t>(T * D));
      for (int64_t row = 0; row < T; ++row) {
        const float* sum = cpu.x.f32() + row * D;  // [D]
        const double inv = inv_rms(sum, D, 1e-6f);
        const double gate = sigmoid(g.f32()[row]);
        double squares = 0, moved = 0;  // Σx², and Σ|x|·(x's bound): how far x's error can move 1/rms
        for (int64_t i = 0; i < D; ++i) {
          const int64_t at = row * D + i;
          const double gated = std::fabs(s.f32()[at] * gate);
          x_bound[at] = kElementwiseRel * gated + 2 * kF32Unit * (std::fabs(r.f32()[at]) + gated + std::fabs(sum[i]));
          squares += static_cast<double>(sum[i]) * sum[i];
          moved += std::fabs(sum[i]) * x_bound[at];
        }
        const double inv_rel = squares > 0 ? moved / squares : 0.0;  // relative change of 1/rms, to first order
        for (int64_t i = 0; i < D; ++i) {
          const int64_t at = row * D + i;
          y_bound[at] = ((norm_rel(D) + inv_rel) * std::fabs(sum[i]) + x_bound[at]) * inv * std::fabs(1.0 + w.f32()[i]);
        }
      }
      c.verdict.close(what + " x", gpu.x, cpu.x, x_bound);
      c.verdict.close(what + " y", gpu.y, cpu.y, y_bound);
    }
  }
}

void gated_rms_norm_case(Context& c) {
  // GDN's value heads (128) and a row past the chunks a lane keeps in registers (600, read again after the reduction).
  for (int64_t D : {int64_t{24}, int64_t{128}, int64_t{600}}) {
    const Tensor w = uniform(c.rng, {D}, 0.5f, 1.5f);
    for (int64_t T : kRowCounts) {
      const int64_t R = T * 3;  // rows are (token, value head) pairs
      const Tensor x = normal(c.rng, {R, D}), z = normal(c.rng, {R, D});
      std::vector<double> bound(static_cast<size_t>(R * D));
      for (int64_t r = 0; r < R; ++r) {
        const double inv = inv_rms(x.f32() + r * D, D, 1e-6f);
        for (int64_t i = 0; i < D; ++i)
          bound[r * D + i] = (norm_rel(D) + kElementwiseRel) *
                             std::fabs(x.f32()[r * D + i] * inv * w.f32()[i] * silu(z.f32()[r * D + i]));
      }
      auto run = [&](Backend& be, int64_t begin, int64_t end) {
        Tensor y = poisoned(be, DType::kF32, {end - begin, D});
        be.gated_rms_norm(be.upload(x.rows(begin, end)), be.upload(z.rows(begin, end)), be.upload(w), 1e-6f, y);
        return fetch_f32(be, y);
      };
      judge_per_row(c, label("gated_rms_norm", R, D), R, bound, run);
    }
  }
}

void slice_columns_case(Context& c) {
  const int64_t C = 77;
  for (int64_t T : kRowCounts) {
    // One guard row past the source, so a kernel reading one column past a slice that ends the last row reads memory
    // that exists instead of faulting.
    const Tensor src = normal(c.rng, {T + 1, C});
    for (auto [begin_col, end_col] : {std::pair<int64_t, int64_t>{0, 1}, {5, 45}, {40, 77}}) {
      auto run = [&](Backend& be, int64_t begin, int64_t end) {
        Tensor dst = poisoned(be, DType::kF32, {end - begin, end_col - begin_col});
        be.slice_columns(be.upload(src.rows(begin, end + 1)).rows(0, end - begin), begin_col, end_col, dst);
        return fetch_f32(be, dst);
      };
      judge_per_row(
          c, label("slice_columns", T, C) + " [" + std::to_string(begin_col) + ", " + std::to_string(end_col) + ")", T,
          std::vector<double>(static_cast<size_t>(T * (end_col - begin_col)), 0.0), run);
    }
  }
}

// mul_sigmoid, mul_sigmoid_rows, silu_mul and add on the same inputs.
void elementwise_case(Context& c) {
  const int64_t D = 77;
  for (int64_t T : kRowCounts) {
    const Tensor x = normal(c.rng, {T, D}), g = normal(c.rng, {T, D}, 2.0f), row_gate = normal(c.rng, {T, 1}, 2.0f);
    std::vector<double> b_mul(T * D), b_rows(T * D), b_silu(T * D);
    for (int64_t i = 0; i < T * D; ++i) {
      b_mul[i] = kElementwiseRel * std::fabs(x.f32()[i] * sigmoid(g.f32()[i]));
      b_rows[i] = kElementwiseRel * std::fabs(x.f32()[i] * sigmoid(row_gate.f32()[i / D]));
      b_silu[i] = kElementwiseRel * std::fabs(silu(g.f32()[i]) * x.f32()[i]);
    }
    judge_per_row(c, label("mul_sigmoid", T, D), T, b_mul, [&](Backend& be, int64_t begin, int64_t end) {
      Tensor y = fresh(be, x.rows(begin, end));
      be.mul_sigmoid(y, be.upload(g.rows(begin, end)));
      return fetch_f32(be, y);
    });
    judge_per_row(c, label("mul_sigmoid_rows", T, D), T, b_rows, [&](Backend& be, int64_t begin, int64_t end) {
      Tensor y = fresh(be, x.rows(begin, end));
      be.mul_sigmoid_rows(y, be.upload(row_gate.rows(begin, end)));
      return fetch_f32(be, y);
    });
    judge_per_row(c, label("silu_mul", T, D), T, b_silu, [&](Backend& be, int64_t begin, int64_t end) {
      Tensor out = poisoned(be, DType::kF32, {end - begin, D});
      be.silu_mul(be.upload(g.rows(begin, end)), be.upload(x.rows(begin, end)), out);
      return fetch_f32(be, out);
    });
    // One correctly rounded F32 addition on both backends: exact agreement.
    judge_per_row(c, label("add", T, D), T, std::vector<double>(static_cast<size_t>(T * D), 0.0),
                  [&](Backend& be, int64_t begin, int64_t end) {
                    Tensor y = fresh(be, x.rows(begin, end));
                    be.add(y, be.upload(g.rows(begin, end)));
                    return fetch_f32(be, y);
                  });
  }
}

// random_uniform: the same values on both backends, and the same values whatever the tensor's shape.
void random_uniform_case(Context& c) {
  const uint64_t seed = c.rng();
  const float lo = -0.75f, hi = 1.25f;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    const int64_t T = 1000, D = 77;
    auto fill = [&](Backend& be, const Shape& shape) {
      // FP8 codes come from empty(), which gives a weight room for its scales (the GPU's is poisoned).
      Tensor t = dtype == DType::kF8E4M3 ? be.empty(dtype, shape) : poisoned(be, dtype, shape);
      be.random_uniform(t, seed, lo, hi);
      return fetch_f32(be, t);
    };
    // lo + (hi − lo)·u: two roundings (or one fused) on each side; BF16 or E4M3 storage then rounds once more, and a
    // one-ulp F32 difference may move that rounding by one BF16 ulp (2^-8 of the value) or E4M3 ulp (2^-3).
    const double scale = std::fabs(lo) + std::fabs(hi - lo);
    const double b = dtype == DType::kBF16     ? kBf16Operand * scale
                     : dtype == DType::kF8E4M3 ? 0x1.0p-3 * scale
                                               : 4 * kF32Unit * scale;
    const std::string what = "random_uniform " + std::string(dtype_name(dtype));
    const Tensor got = fill(c.gpu, {T, D});
    c.verdict.close(what, got, fill(c.cpu, {T, D}), std::vector<double>(static_cast<size_t>(T * D), b));
    c.verdict.same_bits(what + " flat vs [T, D]", fill(c.gpu, {T * D}).reshape({T, D}), got);
    for (int64_t i = 0; i < T * D; ++i)
      if (!(got.f32()[i] >= lo && got.f32()[i] <= hi)) {
        c.verdict.fail(what + ": value " + std::to_string(got.f32()[i]) + " outside [lo, hi]");
        break;
      }
  }
}

// copy_all: more pairs than one launch takes (64), of awkward sizes, one of them many blocks long; each destination a
// row range of one poisoned tensor with a row left between two, so a copy that stops short or runs over shows up as
// a row that differs from the CPU's memmove (which copies the pairs one by one). Rows of 128 F32 values move as
// 16-byte vectors; rows of 77 F32 or BF16 values as bytes.
void copy_all_case(Context& c) {
  for (auto [dtype, D] :
       {std::pair{DType::kF32, int64_t{128}}, {DType::kF32, int64_t{77}}, {DType::kBF16, int64_t{77}}}) {
    std::vector<int64_t> rows;  // [pairs]
    for (int64_t i = 0; i < 70; ++i) rows.push_back(1 + (i * 37) % 23);
    rows[5] = 3001;
    int64_t total = 0;
    for (int64_t n : rows) total += n;
    const Tensor src = to_dtype(normal(c.rng, {total, D}), dtype);
    auto run = [&](Backend& be) {
      const Tensor from = be.upload(src);
      Tensor to = poisoned(be, dtype, {total + static_cast<int64_t>(rows.size()), D});
      std::vector<Tensor> srcs, dsts;
      int64_t at = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        srcs.push_back(from.rows(at, at + rows[i]));
        dsts.push_back(to.rows(at + static_cast<int64_t>(i), at + static_cast<int64_t>(i) + rows[i]));
        at += rows[i];
      }
      be.copy_all(srcs, dsts);
      return be.download(to);
    };
    c.verdict.same_bits("copy_all " + std::string(dtype_name(dtype)) + " D=" + std::to_string(D), run(c.gpu),
                        run(c.cpu));
  }
}

const CaseRegistrar reg_embedding_f32("embedding_f32", [](Context& c) { embedding_case(c, DType::kF32); });
const CaseRegistrar reg_embedding_bf16("embedding_bf16", [](Context& c) { embedding_case(c, DType::kBF16); });
const CaseRegistrar reg_rms_zc("rms_norm_zero_centred", [](Context& c) { rms_norm_case(c, NormWeight::kZeroCentred); });
const CaseRegistrar reg_rms_plain("rms_norm_plain", [](Context& c) { rms_norm_case(c, NormWeight::kPlain); });
const CaseRegistrar reg_add_rms("add_rms_norm", add_rms_norm_case);
const CaseRegistrar reg_add_branch("add_gated_branch_rms_norm", add_gated_branch_rms_norm_case);
const CaseRegistrar reg_gated("gated_rms_norm", gated_rms_norm_case);
const CaseRegistrar reg_slice("slice_columns", slice_columns_case);
const CaseRegistrar reg_elementwise("elementwise", elementwise_case);
const CaseRegistrar reg_random("random_uniform", random_uniform_case);
const CaseRegistrar reg_copy_all("copy_all", copy_all_case);

const ControlRegistrar ctl_embedding(cuda::KernelFault::kEmbeddingRowOffByOne, "embedding_bf16");
const ControlRegistrar ctl_rms(cuda::KernelFault::kRmsNormSkipsWeight, "rms_norm_zero_centred");
const ControlRegistrar ctl_add_rms(cuda::KernelFault::kAddRmsNormKeepsX, "add_rms_norm");
const ControlRegistrar ctl_add_branch(cuda::KernelFault::kAddGatedBranchUngated, "add_gated_branch_rms_norm");
const ControlRegistrar ctl_gated(cuda::KernelFault::kGatedNormGateSign, "gated_rms_norm");
const ControlRegistrar ctl_slice(cuda::KernelFault::kSliceColumnsOneLate, "slice_columns");
const ControlRegistrar ctl_tail(cuda::KernelFault::kElementwiseDropsTail, "elementwise");
const ControlRegistrar ctl_silu_mul(cuda::KernelFault::kSiluMulActivatesUp, "elementwise");
const ControlRegistrar ctl_sigmoid_rows(cuda::KernelFault::kMulSigmoidRowsGateSign, "elementwise");
const ControlRegistrar ctl_random(cuda::KernelFault::kRandomUniformCounterOffByOne, "random_uniform");
const ControlRegistrar ctl_copy_all(cuda::KernelFault::kCopyRegionsDropsTail, "copy_all");

}  // namespace
}  // namespace plumb::harness
