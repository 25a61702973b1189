// CudaBackend's small ops: batched device copies, the embedding gather, the norms, column slices, elementwise gates and
// adds, the random fill (kernels/dense.cu), the MoE router and the token sampler (kernels/sample.cu). Each checks its
// tensors, builds the kernel's params and launches once on the backend's stream.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/dense.h"
#include "backends/cuda/kernels/launch_choices.h"
#include "backends/cuda/kernels/sample.h"
#include "backends/cuda/tensor_checks.h"
#include "core/counter_rng.h"
#include "core/error.h"
#include "ops/checks.h"

namespace plumb {
namespace {

void expect_same_numel(const Tensor& a, const Tensor& b, const char* op, const char* a_name, const char* b_name) {
  PLUMB_CHECK(a.numel() == b.numel(), "{}: {} holds {} elements and {} holds {}", op, a_name, a.numel(), b_name,
              b.numel());
}

// x [R, D], y like x, w [D]: the shared checks of the two norms; returns R.
int64_t norm_rows(const Tensor& x, const Tensor& w, const Tensor& y, const char* op) {
  expect_gpu(x, DType::kF32, op, "x");
  expect_gpu(w, DType::kF32, op, "w");
  expect_gpu(y, DType::kF32, op, "y");
  const int64_t d = w.numel();
  PLUMB_CHECK(d > 0 && x.numel() % d == 0, "{}: {} elements are not rows of {}", op, x.numel(), d);
  expect_same_numel(x, y, op, "x", "y");
  const int64_t rows = x.numel() / d;
  PLUMB_CHECK(rows / 8 < kInt32Max, "{}: {} rows are too many for one launch", op, rows);
  return rows;
}

// The params every norm shares: rows of w.numel() of x, normalized into y.
cuda::RmsNormParams norm_params(const Tensor& x, const Tensor& w, const Tensor& y, int64_t rows, float eps) {
  cuda::RmsNormParams params;
  params.x = x.f32();
  params.w = w.f32();
  params.y = y.f32();
  params.rows = rows;
  params.dim = w.numel();
  params.eps = eps;
  return params;
}

}  // namespace

void CudaBackend::random_uniform(Tensor& t, uint64_t seed, float lo, float hi) {
  PLUMB_CHECK(t.device() == Device::kCuda, "random_uniform: t is not on the GPU");
  PLUMB_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF8E4M3,
              "random_uniform: t is {}, expected F32, BF16 or F8_E4M3", dtype_name(t.dtype()));
  if (t.numel() == 0) return;
  cuda::RandomUniformParams params;
  params.data = t.data();
  params.bf16 = t.dtype() == DType::kBF16;
  params.fp8 = t.dtype() == DType::kF8E4M3;
  params.count = t.numel();
  params.seed = seed;
  params.lo = lo;
  params.range = hi - lo;
  params.max_blocks = cuda::grid_stride_block_cap(cuda::device_limits());
  enqueue("random_uniform_kernel", [&] { cuda::launch_random_uniform(params, fault(), stream()); });
}

void CudaBackend::copy_all(const std::vector<Tensor>& srcs, std::vector<Tensor>& dsts) {
  PLUMB_CHECK(srcs.size() == dsts.size(), "copy_all: {} sources for {} destinations", srcs.size(), dsts.size());
  cuda::CopyRegionsParams params;
  const auto flush = [&] {
    if (params.count == 0) return;
    enqueue("copy_regions_kernel", [&] { cuda::launch_copy_regions(params, fault(), stream()); });
    params = cuda::CopyRegionsParams{};
  };
  for (size_t i = 0; i < srcs.size(); ++i) {
    const Tensor& src = srcs[i];
    Tensor& dst = dsts[i];
    if (src.device() != Device::kCuda || dst.device() != Device::kCuda) {
      copy(src, dst);  // to or from the host: a transfer of its own
      continue;
    }
    PLUMB_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "copy_all: {} {} into {} {}",
                dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
    if (src.nbytes() == 0) continue;
    params.regions[params.count++] = {src.data(), dst.data(), static_cast<int64_t>(src.nbytes())};
    if (params.count == cuda::kMaxCopyRegions) flush();
  }
  flush();
}

namespace {

// The table's vocabulary and width, after the checks both embedding overloads make.
std::pair<int64_t, int64_t> embedding_table(const Tensor& table, const Tensor& out, int64_t tokens) {
  PLUMB_CHECK(table.device() == Device::kCuda, "embedding: table is not on the GPU");
  PLUMB_CHECK(table.dtype() == DType::kBF16 || table.dtype() == DType::kF32,
              "embedding: table is {}, expected BF16 or F32", dtype_name(table.dtype()));
  PLUMB_CHECK(table.rank() == 2, "embedding: table has shape {}, expected [vocab, hidden]", shape_str(table.shape()));
  expect_gpu(out, DType::kF32, "embedding", "out");
  expect_shape(out, {tokens, table.dim(1)}, "embedding", "out");
  PLUMB_CHECK(tokens <= kInt32Max, "embedding: {} tokens are too many for one launch", tokens);
  return {table.dim(0), table.dim(1)};
}

}  // namespace

void CudaBackend::embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) {
  const auto T = static_cast<int64_t>(ids.size());
  const auto [vocab, hidden] = embedding_table(table, out, T);
  for (int32_t id : ids)
    PLUMB_CHECK(id >= 0 && id < vocab, "embedding: token id {} is out of range for vocabulary size {}", id, vocab);
  if (T == 0 || hidden == 0) return;
  const std::shared_ptr<void> device_ids = upload_vector(ids);
  launch_embedding_rows(table, static_cast<const int32_t*>(device_ids.get()), out);
}

void CudaBackend::embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  expect_gpu(ids, DType::kI32, 1, "embedding", "ids");
  const auto [vocab, hidden] = embedding_table(table, out, ids.dim(0));
  if (ids.dim(0) == 0 || hidden == 0) return;
  launch_embedding_rows(table, ids.data_as<const int32_t>(), out);
}

void CudaBackend::launch_embedding_rows(const Tensor& table, const int32_t* ids, Tensor& out) {
  cuda::EmbeddingParams params;
  params.table = table.data();
  params.table_bf16 = table.dtype() == DType::kBF16;
  params.ids = ids;
  params.out = out.f32();
  params.tokens = out.dim(0);
  params.hidden = table.dim(1);
  params.vocab = table.dim(0);
  enqueue("embedding_kernel", [&] { cuda::launch_embedding(params, fault(), stream()); });
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight kind, Tensor& y) {
  const int64_t rows = norm_rows(x, w, y, "rms_norm");
  if (rows == 0) return;
  cuda::RmsNormParams params = norm_params(x, w, y, rows, eps);
  params.weight_offset = kind == NormWeight::kZeroCentred ? 1.0f : 0.0f;
  enqueue("rms_norm_kernel", [&] { cuda::launch_rms_norm(params, fault(), stream()); });
}

void CudaBackend::add_rms_norm(Tensor& x, const Tensor& r, const Tensor& w, float eps, NormWeight kind, Tensor& y) {
  const int64_t rows = norm_rows(x, w, y, "add_rms_norm");
  expect_gpu(r, DType::kF32, "add_rms_norm", "r");
  expect_same_numel(x, r, "add_rms_norm", "x", "r");
  PLUMB_CHECK(y.data() != x.data() && y.data() != r.data(), "add_rms_norm: y must not alias x or r");
  if (rows == 0) return;
  cuda::RmsNormParams params = norm_params(x, w, y, rows, eps);
  params.residual = r.f32();
  params.sum = x.f32();
  params.weight_offset = kind == NormWeight::kZeroCentred ? 1.0f : 0.0f;
  enqueue("rms_norm_kernel (residual step)", [&] { cuda::launch_rms_norm(params, fault(), stream()); });
}

void CudaBackend::add_gated_branch_rms_norm(Tensor& x, const Tensor& r, const GatedBranch& branch, const Tensor& w,
                                            float eps, NormWeight kind, Tensor& y) {
  const char* op = "add_gated_branch_rms_norm";
  const int64_t rows = norm_rows(x, w, y, op);
  expect_gpu(r, DType::kF32, op, "r");
  expect_gpu(branch.out, DType::kF32, op, "branch");
  expect_gpu(branch.gate, DType::kF32, op, "gate");
  expect_same_numel(x, r, op, "x", "r");
  expect_same_numel(x, branch.out, op, "x", "branch");
  PLUMB_CHECK(branch.gate.numel() == rows, "{}: {} gates for {} rows", op, branch.gate.numel(), rows);
  PLUMB_CHECK(y.data() != x.data() && y.data() != r.data() && y.data() != branch.out.data(),
              "{}: y must not alias x, r or the branch", op);
  if (rows == 0) return;
  cuda::RmsNormParams params = norm_params(x, w, y, rows, eps);
  params.residual = r.f32();
  params.sum = x.f32();
  params.branch = branch.out.f32();
  params.branch_gate = branch.gate.f32();
  params.weight_offset = kind == NormWeight::kZeroCentred ? 1.0f : 0.0f;
  enqueue("rms_norm_kernel (residual step, gated branch)", [&] { cuda::launch_rms_norm(params, fault(), stream()); });
}

void CudaBackend::gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) {
  const int64_t rows = norm_rows(x, w, y, "gated_rms_norm");
  expect_gpu(z, DType::kF32, "gated_rms_norm", "z");
  expect_same_numel(x, z, "gated_rms_norm", "x", "z");
  if (rows == 0) return;
  cuda::RmsNormParams params = norm_params(x, w, y, rows, eps);
  params.z = z.f32();
  enqueue("rms_norm_kernel (gated)", [&] { cuda::launch_gated_rms_norm(params, fault(), stream()); });
}

void CudaBackend::slice_columns(const Tensor& src, int64_t begin, int64_t end, Tensor& dst) {
  expect_gpu(src, DType::kF32, "slice_columns", "src");
  expect_gpu(dst, DType::kF32, "slice_columns", "dst");
  PLUMB_CHECK(src.rank() >= 1, "slice_columns: src has shape {}", shape_str(src.shape()));
  const int64_t rows = src.dim(0);
  if (rows == 0 || src.numel() == 0) return;
  const int64_t cols = src.numel() / rows, width = end - begin;
  PLUMB_CHECK(0 <= begin && begin <= end && end <= cols, "slice_columns: [{}, {}) of {} columns", begin, end, cols);
  PLUMB_CHECK(dst.numel() == rows * width, "slice_columns: dst holds {} elements, expected {}", dst.numel(),
              rows * width);
  PLUMB_CHECK(rows <= kInt32Max, "slice_columns: {} rows are too many for one launch", rows);
  if (width == 0) return;
  cuda::SliceColumnsParams params;
  params.src = src.f32();
  params.dst = dst.f32();
  params.rows = rows;
  params.cols = cols;
  params.begin = begin;
  params.width = width;
  enqueue("slice_columns_kernel", [&] { cuda::launch_slice_columns(params, fault(), stream()); });
}

void CudaBackend::mul_sigmoid(Tensor& x, const Tensor& gate) {
  expect_gpu(x, DType::kF32, "mul_sigmoid", "x");
  expect_gpu(gate, DType::kF32, "mul_sigmoid", "gate");
  expect_same_numel(x, gate, "mul_sigmoid", "x", "gate");
  if (x.numel() == 0) return;
  cuda::ElementwiseParams params;
  params.out = x.f32();
  params.a = x.f32();
  params.b = gate.f32();
  params.count = x.numel();
  params.max_blocks = cuda::grid_stride_block_cap(cuda::device_limits());
  enqueue("elementwise_kernel (mul_sigmoid)", [&] { cuda::launch_mul_sigmoid(params, fault(), stream()); });
}

void CudaBackend::mul_sigmoid_rows(Tensor& x, const Tensor& gate) {
  expect_gpu(x, DType::kF32, "mul_sigmoid_rows", "x");
  expect_gpu(gate, DType::kF32, "mul_sigmoid_rows", "gate");
  const int64_t rows = gate.numel();
  if (rows == 0 && x.numel() == 0) return;
  PLUMB_CHECK(rows > 0 && x.numel() % rows == 0, "mul_sigmoid_rows: {} gates for {} elements", rows, x.numel());
  PLUMB_CHECK(rows <= kInt32Max, "mul_sigmoid_rows: {} rows are too many for one launch", rows);
  cuda::MulSigmoidRowsParams params;
  params.x = x.f32();
  params.gate = gate.f32();
  params.rows = rows;
  params.dim = x.numel() / rows;
  if (params.dim == 0) return;
  enqueue("mul_sigmoid_rows_kernel", [&] { cuda::launch_mul_sigmoid_rows(params, fault(), stream()); });
}

void CudaBackend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  expect_gpu(gate, DType::kF32, "silu_mul", "gate");
  expect_gpu(up, DType::kF32, "silu_mul", "up");
  expect_gpu(out, DType::kF32, "silu_mul", "out");
  expect_same_numel(gate, up, "silu_mul", "gate", "up");
  expect_same_numel(gate, out, "silu_mul", "gate", "out");
  if (out.numel() == 0) return;
  cuda::ElementwiseParams params;
  params.out = out.f32();
  params.a = gate.f32();
  params.b = up.f32();
  params.count = out.numel();
  params.max_blocks = cuda::grid_stride_block_cap(cuda::device_limits());
  enqueue("elementwise_kernel (silu_mul)", [&] { cuda::launch_silu_mul(params, fault(), stream()); });
}

void CudaBackend::add(Tensor& x, const Tensor& y) {
  expect_gpu(x, DType::kF32, "add", "x");
  expect_gpu(y, DType::kF32, "add", "y");
  expect_same_numel(x, y, "add", "x", "y");
  if (x.numel() == 0) return;
  cuda::ElementwiseParams params;
  params.out = x.f32();
  params.a = x.f32();
  params.b = y.f32();
  params.count = x.numel();
  params.max_blocks = cuda::grid_stride_block_cap(cuda::device_limits());
  enqueue("elementwise_kernel (add)", [&] { cuda::launch_add(params, fault(), stream()); });
}

void CudaBackend::moe_route(const Tensor& logits, int64_t top_k, bool renormalize, Tensor& expert_ids,
                            Tensor& expert_weights) {
  expect_gpu(logits, DType::kF32, "moe_route", "logits");
  PLUMB_CHECK(logits.rank() == 2, "moe_route: logits have shape {}, expected [T, E]", shape_str(logits.shape()));
  const int64_t T = logits.dim(0), E = logits.dim(1);
  PLUMB_CHECK(E >= 1 && E <= cuda::kMaxRouteExperts, "moe_route: {} experts, expected 1 to {}", E,
              cuda::kMaxRouteExperts);
  PLUMB_CHECK(top_k >= 1 && top_k <= E, "moe_route: top_k {} for {} experts", top_k, E);
  expect_gpu(expert_ids, DType::kI32, "moe_route", "expert_ids");
  expect_gpu(expert_weights, DType::kF32, "moe_route", "expert_weights");
  expect_shape(expert_ids, {T, top_k}, "moe_route", "expert_ids");
  expect_shape(expert_weights, {T, top_k}, "moe_route", "expert_weights");
  PLUMB_CHECK(T <= kInt32Max, "moe_route: {} tokens are too many for one launch", T);
  if (T == 0) return;
  cuda::MoeRouteParams params;
  params.logits = logits.f32();
  params.expert_ids = expert_ids.data_as<int32_t>();
  params.expert_weights = expert_weights.f32();
  params.tokens = T;
  params.experts = static_cast<int32_t>(E);
  params.top_k = static_cast<int32_t>(top_k);
  params.renormalize = renormalize;
  enqueue("moe_route_kernel", [&] { cuda::launch_moe_route(params, fault(), stream()); });
}

void CudaBackend::sample_tokens(const Tensor& logits, const std::vector<TokenDraw>& draws, Tensor& ids) {
  expect_gpu(logits, DType::kF32, "sample_tokens", "logits");
  PLUMB_CHECK(logits.rank() == 2, "sample_tokens: logits have shape {}, expected [rows, vocab]",
              shape_str(logits.shape()));
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  PLUMB_CHECK(static_cast<int64_t>(draws.size()) == rows, "sample_tokens: {} draws for {} rows", draws.size(), rows);
  PLUMB_CHECK(vocab >= 1 && vocab <= kInt32Max, "sample_tokens: vocabulary of {} tokens, expected 1 to 2^31 - 1",
              vocab);
  expect_gpu(ids, DType::kI32, "sample_tokens", "ids");
  expect_shape(ids, {rows}, "sample_tokens", "ids");
  PLUMB_CHECK(rows <= kInt32Max, "sample_tokens: {} rows are too many for one launch", rows);
  if (rows == 0) return;
  std::vector<cuda::SampleDraw> table(static_cast<size_t>(rows));
  std::vector<uint32_t> allowed;  // [rows with allowed tokens, allowed_words(vocab)]
  const int64_t words = allowed_words(vocab);
  for (int64_t r = 0; r < rows; ++r) {
    const TokenDraw& d = draws[r];
    check_token_draw(d, r, vocab);
    if (d.allowed != nullptr) {
      table[r].allowed = static_cast<int64_t>(allowed.size());
      allowed.insert(allowed.end(), d.allowed, d.allowed + words);
    }
    cuda::SampleDraw& out = table[r];
    out.greedy = d.temperature == 0.0f ? 1 : 0;
    out.inv_temperature = d.temperature == 0.0f ? 0.0f : 1.0f / d.temperature;
    out.top_k = d.top_k;
    out.top_p = d.top_p;
    // u = k · 2^-24 with k a 24-bit integer, so this is exact.
    out.u24 = static_cast<uint32_t>(uniform_f32_from_counter(d.seed, d.step) * 16777216.0f);
  }
  const std::shared_ptr<void> device_draws = upload_vector(table);
  // Only where some row has allowed tokens: a recorded step's tables keep the layout of its recording (a step graph
  // records its draws without them).
  const std::shared_ptr<void> device_allowed = allowed.empty() ? nullptr : upload_vector(allowed);
  cuda::SampleTokensParams params;
  params.logits = logits.f32();
  params.draws = static_cast<const cuda::SampleDraw*>(device_draws.get());
  params.allowed = static_cast<const uint32_t*>(device_allowed.get());
  params.ids = ids.data_as<int32_t>();
  params.rows = rows;
  params.vocab = vocab;
  enqueue("sample_tokens_kernel", [&] { cuda::launch_sample_tokens(params, fault(), stream()); });
}

}  // namespace plumb
