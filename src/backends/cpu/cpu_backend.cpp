// Memory, elementwise ops, norms and projections of the CPU reference backend.
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/checks.h"

namespace plumb {
namespace cpu {

float dot(const float* a, const float* b, int64_t n) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) partial[i % 8] += a[i] * b[i];
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

float sliced_dot(const float* a, const float* b, int64_t n) {
  constexpr int64_t kSlice = 128;
  // -0 is the identity of F32 addition: the first slice's sum comes through exactly, as on the GPU.
  float sum = -0.0f;
  for (int64_t i = 0; i < n; i += kSlice) sum += dot(a + i, b + i, std::min(kSlice, n - i));
  return sum;
}

const float* weight_row(const Tensor& w, int64_t n, std::vector<float>& scratch) {
  const int64_t k = w.dim(-1);
  if (w.dtype() == DType::kF32) return w.data_as<const float>() + n * k;
  scratch.resize(static_cast<size_t>(k));
  const auto* base = static_cast<const unsigned char*>(w.data()) + dtype_bytes(w.dtype(), n * k);
  if (const Tensor* groups = w.group_scales()) {
    // An NVFP4 weight: each code times its group's scale and the weight's, one rounding (widen_quantized's values).
    widen_nvfp4_row(base, groups->data_as<const uint8_t>() + n * groups->dim(-1), w.block_scales()->f32()[n], k,
                    scratch.data());
  } else if (const Tensor* scales = w.block_scales()) {
    // An FP8 weight: each code times its row's multiplier for its K-slice, one rounding (widen_fp8_weight's values).
    widen_fp8_row(base, scales->data_as<const float>() + n * scales->dim(-1), k, kWeightScaleBlockK, scratch.data());
  } else {
    convert_to_f32(w.dtype(), base, scratch.data(), static_cast<size_t>(k));
  }
  return scratch.data();
}

float round_to_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

void round_to_bf16(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = round_to_bf16(v[i]);
}

}  // namespace cpu

namespace {
void expect_f32(const Tensor& t, const char* op, const char* arg) {
  PLUMB_CHECK(t.dtype() == DType::kF32 && t.device() == Device::kCpu, "{}: {} must be an F32 host tensor", op, arg);
}
void expect_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  PLUMB_CHECK(a.numel() == b.numel(), "{}: operands hold {} and {} elements", op, a.numel(), b.numel());
}
}  // namespace

// From /proc/meminfo: MemAvailable is what the host can give without swapping, as the kernel estimates it. Zeros
// where the file is missing (not Linux), which a caller sizing a budget from it refuses.
MemoryInfo CpuBackend::memory_info() const {
  std::ifstream in("/proc/meminfo");
  MemoryInfo info;
  std::string line, key;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int64_t kib = 0;
    if (!(fields >> key >> kib)) continue;
    if (key == "MemAvailable:") info.free_bytes = kib * 1024;
    if (key == "MemTotal:") info.total_bytes = kib * 1024;
  }
  return info;
}

// A quantized weight comes with its scales (zero), as on every backend.
Tensor CpuBackend::zeros(DType dtype, const Shape& shape) {
  return Tensor::make_with_scales(dtype, shape, [](DType d, const Shape& s) { return Tensor::zeros(d, s); });
}

// Host memory is this backend's memory: weights stay where the loader put them (often a read-only file mapping).
Tensor CpuBackend::upload(const Tensor& host) {
  return host;
}

Tensor CpuBackend::download(const Tensor& t) {
  Tensor out = Tensor::zeros(t.dtype(), t.shape());
  std::memcpy(out.data(), t.data(), t.nbytes());
  return out;
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  PLUMB_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "copy: {} {} into {} {}",
              dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
  copy_block_scales(*this, src, dst);
  std::memmove(dst.data(), src.data(), src.nbytes());
}

void CpuBackend::embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) {
  const int64_t vocab = table.dim(0), hidden = table.dim(1);
  expect_f32(out, "embedding", "out");
  expect_shape(out, {static_cast<int64_t>(ids.size()), hidden}, "embedding", "out");
  std::vector<float> scratch;
  for (size_t t = 0; t < ids.size(); ++t) {
    PLUMB_CHECK(ids[t] >= 0 && ids[t] < vocab, "token id {} is out of range for vocabulary size {}", ids[t], vocab);
    const float* row = cpu::weight_row(table, ids[t], scratch);
    std::memcpy(out.f32() + t * hidden, row, static_cast<size_t>(hidden) * sizeof(float));
  }
}

void CpuBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  embedding(table, host_token_ids(ids, "embedding"), out);
}

void CpuBackend::linear(const Tensor& x, const Tensor& w, Tensor& y) {
  expect_f32(x, "linear", "x");
  expect_f32(y, "linear", "y");
  const int64_t rows = x.dim(0), k = x.dim(1), n_out = w.dim(0);
  PLUMB_CHECK(w.rank() == 2 && w.dim(1) == k, "linear: weight {} does not match input {}", shape_str(w.shape()),
              shape_str(x.shape()));
  expect_shape(y, {rows, n_out}, "linear", "y");
  const float* px = x.f32();
  std::vector<float> rounded;  // [rows, k]: x with the GPU's BF16 operand rounding
  if (rounds_operand_of(w)) {
    rounded.assign(px, px + rows * k);
    cpu::round_to_bf16(rounded.data(), rows * k);
    px = rounded.data();
  }
  float* py = y.f32();
  // Output features are split across threads; each y element is one dot product in a fixed order.
  parallel_for(n_out, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t n = begin; n < end; ++n) {
      const float* wrow = cpu::weight_row(w, n, scratch);
      for (int64_t t = 0; t < rows; ++t) py[t * n_out + n] = cpu::sliced_dot(px + t * k, wrow, k);
    }
  });
}

std::unique_ptr<StepGraph> CpuBackend::record_step(int64_t, const std::function<void()>& step) {
  step();
  return nullptr;
}

void CpuBackend::replay_step(StepGraph&, const std::function<void()>&) {
  PLUMB_FAIL("replay_step: the CPU backend records no step to replay");
}

void CpuBackend::linear_parts(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) {
  PLUMB_CHECK(ws.size() == ys.size(), "linear_parts: {} weights for {} outputs", ws.size(), ys.size());
  for (size_t j = 0; j < ws.size(); ++j) {
    PLUMB_CHECK(ws[j] && ys[j], "linear_parts: part {} has no weight or no output", j);
    linear(x, *ws[j], *ys[j]);
  }
}

void CpuBackend::add_rms_norm(Tensor& x, const Tensor& r, const Tensor& w, float eps, NormWeight kind, Tensor& y) {
  PLUMB_CHECK(y.data() != x.data() && y.data() != r.data(), "add_rms_norm: y must not alias x or r");
  add(x, r);
  rms_norm(x, w, eps, kind, y);
}

void CpuBackend::add_gated_branch_rms_norm(Tensor& x, const Tensor& r, const GatedBranch& branch, const Tensor& w,
                                           float eps, NormWeight kind, Tensor& y) {
  PLUMB_CHECK(y.data() != x.data() && y.data() != r.data() && y.data() != branch.out.data(),
              "add_gated_branch_rms_norm: y must not alias x, r or the branch");
  expect_same_numel(r, branch.out, "add_gated_branch_rms_norm");
  Tensor gated = Tensor::zeros(DType::kF32, branch.out.shape());  // [R, D]
  copy(branch.out, gated);
  mul_sigmoid_rows(gated, branch.gate);
  Tensor sum = Tensor::zeros(DType::kF32, r.shape());  // [R, D] r + the gated branch
  copy(r, sum);
  add(sum, gated);
  add_rms_norm(x, sum, w, eps, kind, y);
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight kind, Tensor& y) {
  expect_f32(x, "rms_norm", "x");
  expect_f32(w, "rms_norm", "w");
  const int64_t d = w.numel(), rows = x.numel() / d;
  PLUMB_CHECK(rows * d == x.numel(), "rms_norm: {} elements are not rows of {}", x.numel(), d);
  expect_same_numel(x, y, "rms_norm");
  const float* px = x.f32();
  const float* pw = w.f32();
  float* py = y.f32();
  const float offset = kind == NormWeight::kZeroCentred ? 1.0f : 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * d;
    const float inv = 1.0f / std::sqrt(cpu::dot(xr, xr, d) / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) py[r * d + i] = xr[i] * inv * (offset + pw[i]);
  }
}

void CpuBackend::gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) {
  expect_f32(x, "gated_rms_norm", "x");
  expect_f32(z, "gated_rms_norm", "z");
  const int64_t d = w.numel(), rows = x.numel() / d;
  PLUMB_CHECK(rows * d == x.numel(), "gated_rms_norm: {} elements are not rows of {}", x.numel(), d);
  expect_same_numel(x, z, "gated_rms_norm");
  expect_same_numel(x, y, "gated_rms_norm");
  const float *px = x.f32(), *pz = z.f32(), *pw = w.f32();
  float* py = y.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * d;
    const float inv = 1.0f / std::sqrt(cpu::dot(xr, xr, d) / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) py[r * d + i] = xr[i] * inv * pw[i] * cpu::silu(pz[r * d + i]);
  }
}

void CpuBackend::slice_columns(const Tensor& src, int64_t begin, int64_t end, Tensor& dst) {
  expect_f32(src, "slice_columns", "src");
  const int64_t rows = src.dim(0), cols = src.numel() / rows, width = end - begin;
  PLUMB_CHECK(0 <= begin && begin <= end && end <= cols, "slice_columns: [{}, {}) of {} columns", begin, end, cols);
  PLUMB_CHECK(dst.numel() == rows * width, "slice_columns: destination holds {} elements, expected {}", dst.numel(),
              rows * width);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst.f32() + r * width, src.f32() + r * cols + begin, static_cast<size_t>(width) * sizeof(float));
}

void CpuBackend::mul_sigmoid(Tensor& x, const Tensor& gate) {
  expect_same_numel(x, gate, "mul_sigmoid");
  float* px = x.f32();
  const float* pg = gate.f32();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] *= cpu::sigmoid(pg[i]);
}

void CpuBackend::mul_sigmoid_rows(Tensor& x, const Tensor& gate) {
  const int64_t rows = gate.numel(), d = x.numel() / rows;
  PLUMB_CHECK(rows * d == x.numel(), "mul_sigmoid_rows: {} gates for {} elements", rows, x.numel());
  float* px = x.f32();
  const float* pg = gate.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float s = cpu::sigmoid(pg[r]);
    for (int64_t i = 0; i < d; ++i) px[r * d + i] *= s;
  }
}

void CpuBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  expect_same_numel(gate, up, "silu_mul");
  expect_same_numel(gate, out, "silu_mul");
  const float *pg = gate.f32(), *pu = up.f32();
  float* po = out.f32();
  for (int64_t i = 0; i < gate.numel(); ++i) po[i] = cpu::silu(pg[i]) * pu[i];
}

void CpuBackend::add(Tensor& x, const Tensor& y) {
  expect_same_numel(x, y, "add");
  float* px = x.f32();
  const float* py = y.f32();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] += py[i];
}

}  // namespace plumb
