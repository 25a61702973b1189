// The CUDA backend: every op of the Backend interface on an NVIDIA GPU (Hopper first). Activations and recurrent
// states are F32 in device memory; weights keep their checkpoint's BF16 (F16 is widened to F32 at upload); attention
// caches are BF16. Matrix products round activations to BF16 as tensor-core operands and accumulate in F32.
//
// Exactness: no floating-point atomics, and every reduction runs in an order fixed by the shapes of the model, never
// by the number of tokens or sequences in a call, so a sequence's results are bit-identical across runs and batches.
//
// The kernels (kernels/) take raw pointers and a params struct; this class turns Tensors into those structs. Its
// methods are defined across cuda_backend*.cpp, one file per kernel family.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/kernels/fault.h"
#include "backends/cuda/kernels/linear.h"
#include "ops/backend.h"

namespace plumb {

// Throws plumb::Error naming `what` and CUDA's message when status is not cudaSuccess.
void cuda_check(cudaError_t status, const char* what);
// Checks the launch that just happened (cudaGetLastError), naming the kernel, and counts `kernels` launches (a call
// may launch several) towards kernel_launches().
void cuda_check_launch(const char* kernel, int kernels = 1);
// Counts `kernels` launches that ran without their own check (a replayed graph's) towards kernel_launches().
void cuda_count_launches(int64_t kernels);

class CudaMemoryPool;
class PinnedStaging;
namespace cuda {
struct MoeIdReport;
}

// Why no CUDA device is usable here (cudaGetDeviceCount's error, or no device), or "" when one is; never throws.
std::string cuda_device_problem();
// Whether a CUDA device is usable here (false without a driver or a GPU); never throws.
bool cuda_device_available();

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_ordinal = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  DType kv_dtype() const override { return DType::kBF16; }
  void synchronize() override;
  int64_t kernel_launches() const override;
  void release_cached_memory() override;
  MemoryInfo memory_info() const override;
  void concurrently(const std::function<void()>& first, const std::function<void()>& second) override;
  std::unique_ptr<StepGraph> record_step(int64_t max_kv_pages, const std::function<void()>& step) override;
  void replay_step(StepGraph& graph, const std::function<void()>& step) override;

  Tensor zeros(DType dtype, const Shape& shape) override;
  Tensor empty(DType dtype, const Shape& shape) override;
  Tensor upload(const Tensor& host) override;
  Tensor download(const Tensor& t) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_all(const std::vector<Tensor>& srcs, std::vector<Tensor>& dsts) override;
  void random_uniform(Tensor& t, uint64_t seed, float lo, float hi) override;

  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override;
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override;
  void linear(const Tensor& x, const Tensor& w, Tensor& y) override;
  void linear_parts(const Tensor& x, const std::vector<const Tensor*>& ws, const std::vector<Tensor*>& ys) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, NormWeight kind, Tensor& y) override;
  void add_rms_norm(Tensor& x, const Tensor& r, const Tensor& w, float eps, NormWeight kind, Tensor& y) override;
  void add_gated_branch_rms_norm(Tensor& x, const Tensor& r, const GatedBranch& branch, const Tensor& w, float eps,
                                 NormWeight kind, Tensor& y) override;
  void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) override;
  void slice_columns(const Tensor& src, int64_t begin, int64_t end, Tensor& dst) override;

  void causal_conv1d_silu(const Tensor& x, const Tensor& w, const std::vector<Tensor*>& states, const BatchRows& batch,
                          Tensor& y, const StateTrails& trails = {}) override;
  void gated_delta_rule(const Tensor& qkv, int64_t key_heads, const Tensor& a, const Tensor& b, const Tensor& A_log,
                        const Tensor& dt_bias, const std::vector<Tensor*>& states, const BatchRows& batch, Tensor& o,
                        GdnAlgorithm algorithm, const StateTrails& trails = {}) override;

  void rotary_embedding(Tensor& x, const std::vector<int64_t>& positions, int64_t rotary_dim, double theta) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<KvCache*>& caches,
                 const BatchRows& batch, Tensor& o, GdnAlgorithm rule) override;

  void mul_sigmoid(Tensor& x, const Tensor& gate) override;
  void mul_sigmoid_rows(Tensor& x, const Tensor& gate) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void add(Tensor& x, const Tensor& y) override;

  void moe_route(const Tensor& logits, int64_t top_k, bool renormalize, Tensor& expert_ids,
                 Tensor& expert_weights) override;
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                   const ExpertWeights& experts, Tensor& y) override;
  void sample_tokens(const Tensor& logits, const std::vector<TokenDraw>& draws, Tensor& ids) override;

  // --- For the kernel glue (cuda_backend_*.cpp) and the op harness. ---
  cudaStream_t stream() const { return stream_; }
  const cudaDeviceProp& properties() const { return properties_; }
  // The variant every later launch uses: kNone in production; the harness plants its controls through this.
  void set_fault(cuda::KernelFault fault) { fault_ = fault; }
  cuda::KernelFault fault() const { return fault_; }
  // For the op harness: every later linear launches `variant` instead of choosing one (nullopt: choose, as in
  // production). A variant that cannot run a product on this GPU is an error naming it, never replaced.
  void set_linear_variant(std::optional<cuda::LinearVariant> variant) { linear_variant_ = variant; }
  // When on, empty() fills new memory with NaN bytes (0xFF), so a kernel that leaves an element unwritten fails
  // its check instead of passing on stale data.
  void set_poison(bool poison) { poison_ = poison; }
  // A device copy of `bytes` host bytes (a pointer table, ids, positions), alive as long as the returned owner and
  // ordered on stream() before any later launch.
  std::shared_ptr<void> upload_bytes(const void* host, size_t bytes);
  template <typename T>
  std::shared_ptr<void> upload_vector(const std::vector<T>& host) {
    return upload_bytes(host.data(), host.size() * sizeof(T));
  }
  // Raw device scratch of `bytes` bytes, uninitialized, from the same pool as tensors (from the step arena while a
  // step is recorded or replayed).
  std::shared_ptr<void> scratch(size_t bytes);
  // Runs launch() (the kernel glue's call into kernels/, `kernels` launches) and checks it, naming `kernel`; while a
  // replayed step's host work runs, launches nothing: the step's graph holds the kernels.
  template <class Launch>
  void enqueue(const char* kernel, Launch&& launch, int kernels = 1) {
    if (step_mode_ == StepMode::kPlan) return;
    launch();
    cuda_check_launch(kernel, kernels);
  }
  // The page-table stride of a recorded or replayed step (Backend::record_step's max_kv_pages), else 0: attention
  // then lays each sequence's page table out at this stride.
  int64_t step_kv_pages() const { return step_mode_ == StepMode::kEager ? 0 : step_kv_pages_; }
  // Whether a recorded or replayed step is running: device work outside kernels (copies, fills) is recorded with it
  // or, while replaying, left to the graph.
  bool in_step() const { return step_mode_ != StepMode::kEager; }
  // Where kernels report bad input that only the device sees (expert ids out of range); synchronize() reads it and
  // throws plumb::Error naming the input, so a bad id fails the call that waits for it, never silently.
  cuda::MoeIdReport* moe_id_report() const { return moe_id_report_; }

 private:
  // Arrival counters of split products (kernels/linear.h) and split attention tiles (kernels/attention.h), 4 MiB per
  // stream: production splits only products of few tiles; the harness forces splits on up to 4096 rows of 8192
  // features (262144 tiles of one-warp blocks).
  static constexpr int64_t kLinearArrivals = int64_t{1} << 20;
  // Pins `params` to the harness's variant when one is set, chooses how K is spread, and returns the partial sums'
  // scratch (alive until the launch is queued) with params pointing at it and at the arrival counters.
  std::shared_ptr<void> plan_linear(cuda::LinearParams& params, const char* op);
  // Runs the product of x [rows, k] (checked) with the weights [n, k] that start at w (a run of stacked parts may
  // follow it: n covers them all) into the output params already names (y or its parts): chooses the shape and
  // split, stages x as BF16 where the shape reads it so, and launches.
  void launch_product(const Tensor& x, const Tensor& w, int64_t n, cuda::LinearParams& params, const char* op);
  // x [rows, k] F32 staged as BF16 where `shape` reads its activations so (in slot order for the wgmma shape), in
  // scratch alive until the product is queued; nullptr where the shape reads F32.
  std::shared_ptr<void> stage_bf16(const float* x, int64_t rows, int64_t k, cuda::LinearShape shape);

  enum class StepMode { kEager, kRecord, kPlan };
  class StepMemory;
  // Puts the backend in `mode` for one step: the arena and tables start over, and a recorded step's layout (every
  // arena block and table, in order) is written to or checked against `layout`.
  void begin_step(StepMode mode, int64_t max_kv_pages, std::vector<int64_t>* layout);
  // Ends the step's mode and queues its tables' one upload.
  void end_step();
  // While a step is recorded or replayed: a device block of its arena, the device address a table of `bytes` host
  // bytes will have after the step's upload, and the step's serial number (0 outside steps).
  void* step_arena(size_t bytes);
  void* step_table(const void* host, size_t bytes);
  // The embedding gather of `ids` ([out rows] device) from `table` into out, after the callers' checks.
  void launch_embedding_rows(const Tensor& table, const int32_t* ids, Tensor& out);

 public:
  uint64_t step_serial() const;

 private:
  // Uploads attention's page tables, or hands back the last upload where it holds the same ids (see the .cpp).
  const int32_t* upload_page_tables(const std::vector<int32_t>& page_tables);
  struct PageTablesUpload {
    std::vector<int32_t> ids;
    std::shared_ptr<void> device;
    uint64_t step = 0;
  };
  PageTablesUpload last_page_tables_;

  StepMode step_mode_ = StepMode::kEager;
  int64_t step_kv_pages_ = 0;
  // Defined with StepMemory in cuda_backend_step.cpp.
  struct StepMemoryDeleter {
    void operator()(StepMemory* memory) const;
  };
  std::unique_ptr<StepMemory, StepMemoryDeleter> step_memory_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaDeviceProp properties_{};
  std::shared_ptr<CudaMemoryPool> pool_;
  std::unique_ptr<PinnedStaging> staging_;
  cuda::KernelFault fault_ = cuda::KernelFault::kNone;
  std::optional<cuda::LinearVariant> linear_variant_;
  bool poison_ = false;
  cuda::MoeIdReport* moe_id_report_ = nullptr;       // [1] device
  cuda::MoeIdReport* moe_id_report_host_ = nullptr;  // [1] pinned: the copy synchronize() reads
  int32_t* linear_arrivals_ = nullptr;               // [kLinearArrivals] device, zeros between launches
  // The second stream of concurrently() and what it swaps in while `second` is queued: its own arrival counters (the
  // second half of one allocation, so split products on the two streams never share a counter). fork_ and join_
  // order it after what came before and before what comes after.
  cudaStream_t side_stream_ = nullptr;
  int32_t* side_arrivals_ = nullptr;  // [kLinearArrivals] device, zeros between launches
  cudaEvent_t fork_ = nullptr;
  cudaEvent_t join_ = nullptr;
};

}  // namespace plumb
