// The CUDA backend's device, stream and memory. Allocations come from a caching pool: the forward pass asks for
// many short-lived activations per step, and cudaMalloc/cudaFree would synchronize the device each time. Blocks are
// reused only in stream order (one stream per backend), so a block freed by one op and handed to the next is never
// touched by both at once.
#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "backends/cuda/kernels/device_limits.h"
#include "backends/cuda/kernels/experts.h"
#include "core/error.h"
#include "ops/checks.h"

namespace plumb {

void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    PLUMB_FAIL("CUDA: {} failed: {} ({})", what, cudaGetErrorString(status), static_cast<int>(status));
}

namespace {
// Every launch of every CudaBackend of the process: launches are counted where they are checked, and a bench runs
// one backend.
std::atomic<int64_t> launches_checked{0};
}  // namespace

void cuda_count_launches(int64_t kernels) {
  launches_checked.fetch_add(kernels, std::memory_order_relaxed);
}

void cuda_check_launch(const char* kernel, int kernels) {
  cuda_count_launches(kernels);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) PLUMB_FAIL("CUDA: launching {} failed: {}", kernel, cudaGetErrorString(status));
}

std::string cuda_device_problem() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error so later checks start clean
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(status) + " (" +
           std::to_string(static_cast<int>(status)) + ")";
  }
  return count > 0 ? std::string() : "cudaGetDeviceCount found no device";
}

bool cuda_device_available() {
  return cuda_device_problem().empty();
}

// Device memory in size classes, kept for reuse until the pool is destroyed (or an allocation fails, which first
// returns every cached block to the driver and tries again).
class CudaMemoryPool {
 public:
  explicit CudaMemoryPool(int device) : device_(device) {}
  ~CudaMemoryPool() {
    cudaSetDevice(device_);
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) cudaFree(p);
  }

  // Small blocks round up to a power of two (at least 512 bytes), large ones to a multiple of 2 MiB.
  static size_t size_class(size_t bytes) {
    constexpr size_t kLarge = size_t{2} << 20;
    if (bytes >= kLarge) return (bytes + kLarge - 1) / kLarge * kLarge;
    size_t c = 512;
    while (c < bytes) c <<= 1;
    return c;
  }

  void* allocate(size_t bytes) {
    const size_t c = size_class(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(c);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    if (cudaMalloc(&p, c) != cudaSuccess) {
      cudaGetLastError();
      release_cached();
      cuda_check(cudaMalloc(&p, c), fmt::format("cudaMalloc of {} bytes", c).c_str());
    }
    return p;
  }

  void release(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[size_class(bytes)].push_back(p);
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    cudaDeviceSynchronize();  // a cached block may still be in use by queued work
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) cudaFree(p);
    free_.clear();
  }

 private:
  int device_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
};

// Pinned host memory that small host tables pass through on their way to the device. From pageable memory,
// cudaMemcpyAsync first waits for the stream to drain, so every per-sequence op (its table of sequences) would stall
// the host until the GPU caught up and leave the GPU idle while the next kernels are launched; from pinned memory the
// copy is queued like a kernel. The buffer is used as a ring of two halves: before the ring re-enters a half, the
// host waits for an event recorded when it last left that half, so no table is overwritten before its copy ran.
class PinnedStaging {
 public:
  static constexpr size_t kBytes = size_t{1} << 20;
  static constexpr size_t kHalf = kBytes / 2;
  static constexpr size_t kAlign = 256;

  explicit PinnedStaging(cudaStream_t stream) : stream_(stream) {
    cuda_check(cudaHostAlloc(&buffer_, kBytes, cudaHostAllocDefault), "cudaHostAlloc of the upload staging buffer");
    for (cudaEvent_t& e : left_half_)
      cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~PinnedStaging() {
    cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : left_half_) cudaEventDestroy(e);
    cudaFreeHost(buffer_);
  }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Queues a copy of `bytes` host bytes to `device` on the stream; false (nothing queued) when they exceed a half.
  bool copy_to_device(void* device, const void* host, size_t bytes) {
    if (bytes > kHalf) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    size_t begin = offset_ < kBytes ? offset_ : 0;
    // A table never straddles the two halves: one that would starts the next half instead.
    if (begin / kHalf != (begin + bytes - 1) / kHalf) begin = (begin / kHalf + 1) * kHalf % kBytes;
    const int half = static_cast<int>(begin / kHalf);
    if (half != half_) {
      cuda_check(cudaEventRecord(left_half_[half_], stream_), "recording the staging event");
      if (recorded_[half]) cuda_check(cudaEventSynchronize(left_half_[half]), "waiting for the staging buffer");
      recorded_[half_] = true;
      half_ = half;
    }
    std::memcpy(static_cast<char*>(buffer_) + begin, host, bytes);
    cuda_check(cudaMemcpyAsync(device, static_cast<char*>(buffer_) + begin, bytes, cudaMemcpyHostToDevice, stream_),
               "upload of a host table");
    offset_ = (begin + bytes + kAlign - 1) / kAlign * kAlign;
    return true;
  }

 private:
  cudaStream_t stream_;
  void* buffer_ = nullptr;
  cudaEvent_t left_half_[2] = {};
  bool recorded_[2] = {false, false};
  int half_ = 0;
  size_t offset_ = 0;
  std::mutex mutex_;
};

CudaBackend::CudaBackend(int device_ordinal) : device_(device_ordinal) {
  const std::string problem = cuda_device_problem();
  PLUMB_CHECK(problem.empty(), "--device cuda: no CUDA device is available ({})", problem);
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  const std::string image = cuda::kernel_image_problem();
  PLUMB_CHECK(image.empty(), "--device cuda: {}", image);
  cuda_check(cudaGetDeviceProperties(&properties_, device_), "cudaGetDeviceProperties");
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  pool_ = std::make_shared<CudaMemoryPool>(device_);
  staging_ = std::make_unique<PinnedStaging>(stream_);
  cuda_check(cudaMalloc(&moe_id_report_, sizeof(cuda::MoeIdReport)), "cudaMalloc of the expert-id report");
  cuda_check(cudaMallocHost(&moe_id_report_host_, sizeof(cuda::MoeIdReport)), "cudaMallocHost of its copy");
  *moe_id_report_host_ = cuda::MoeIdReport{};
  cuda_check(cudaMemcpy(moe_id_report_, moe_id_report_host_, sizeof(cuda::MoeIdReport), cudaMemcpyHostToDevice),
             "clearing the expert-id report");
  cuda_check(cudaMalloc(&linear_arrivals_, 2 * kLinearArrivals * sizeof(int32_t)),
             "cudaMalloc of the arrival counters");
  cuda_check(cudaMemset(linear_arrivals_, 0, 2 * kLinearArrivals * sizeof(int32_t)), "clearing the arrival counters");
  side_arrivals_ = linear_arrivals_ + kLinearArrivals;
  cuda_check(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreate");
}

CudaBackend::~CudaBackend() {
  step_memory_.reset();  // waits for the stream
  staging_.reset();
  cudaFree(linear_arrivals_);
  cudaFree(moe_id_report_);
  cudaFreeHost(moe_id_report_host_);
  cudaEventDestroy(fork_);
  cudaEventDestroy(join_);
  cudaStreamDestroy(side_stream_);
  cudaStreamDestroy(stream_);
}

void CudaBackend::concurrently(const std::function<void()>& first, const std::function<void()>& second) {
  // Eagerly the memory pool hands a freed block to the next op in stream order, which a second stream would break;
  // a replay's host pass launches nothing, and asks for its arena blocks in the recording's order either way.
  if (step_mode_ != StepMode::kRecord) {
    first();
    second();
    return;
  }
  cuda_check(cudaEventRecord(fork_, stream_), "forking a step's second stream");
  first();
  cuda_check(cudaStreamWaitEvent(side_stream_, fork_), "forking a step's second stream");
  // While `second` is queued, its ops see the second stream and its arrival counters as the backend's own; the arena
  // is a bump allocator within a step, so the two groups' blocks never overlap.
  struct SideSwap {
    CudaBackend& b;
    explicit SideSwap(CudaBackend& backend) : b(backend) { swap(); }
    ~SideSwap() { swap(); }
    void swap() {
      std::swap(b.stream_, b.side_stream_);
      std::swap(b.linear_arrivals_, b.side_arrivals_);
    }
  };
  {
    const SideSwap side(*this);
    second();
  }
  cuda_check(cudaEventRecord(join_, side_stream_), "joining a step's second stream");
  cuda_check(cudaStreamWaitEvent(stream_, join_), "joining a step's second stream");
}

void CudaBackend::synchronize() {
  PLUMB_CHECK(!in_step(), "a recorded or replayed step may not wait for the device");
  cuda_check(
      cudaMemcpyAsync(moe_id_report_host_, moe_id_report_, sizeof(cuda::MoeIdReport), cudaMemcpyDeviceToHost, stream_),
      "reading the expert-id report");
  cuda_check(cudaStreamSynchronize(stream_), "synchronize");
  const cuda::MoeIdReport report = *moe_id_report_host_;
  if (report.first_bad == cuda::kMoeIdReportClear) return;
  // Cleared before the throw, so the next call starts with a clean report.
  *moe_id_report_host_ = cuda::MoeIdReport{};
  cuda_check(cudaMemcpy(moe_id_report_, moe_id_report_host_, sizeof(cuda::MoeIdReport), cudaMemcpyHostToDevice),
             "clearing the expert-id report");
  const auto pair = static_cast<int64_t>(report.first_bad >> 32);
  const auto id = static_cast<int32_t>(static_cast<uint32_t>(report.first_bad & 0xffffffffu));
  PLUMB_FAIL("moe_experts: token {} slot {} has expert id {}, outside [0, {})", pair / report.top_k,
             pair % report.top_k, id, report.experts);
}

int64_t CudaBackend::kernel_launches() const {
  return launches_checked.load(std::memory_order_relaxed);
}

void CudaBackend::release_cached_memory() {
  pool_->release_cached();
}

MemoryInfo CudaBackend::memory_info() const {
  size_t free = 0, total = 0;
  cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

std::shared_ptr<void> CudaBackend::scratch(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  // The arena owns a step's memory: its blocks go back when the next step starts over, not when freed.
  if (in_step()) return std::shared_ptr<void>(step_arena(bytes), [](void*) {});
  void* p = pool_->allocate(bytes);
  std::shared_ptr<CudaMemoryPool> pool = pool_;
  return std::shared_ptr<void>(p, [pool, bytes](void* q) { pool->release(q, bytes); });
}

std::shared_ptr<void> CudaBackend::upload_bytes(const void* host, size_t bytes) {
  if (in_step()) return std::shared_ptr<void>(step_table(host, bytes), [](void*) {});
  std::shared_ptr<void> block = scratch(bytes);
  if (bytes > 0 && !staging_->copy_to_device(block.get(), host, bytes))
    cuda_check(cudaMemcpyAsync(block.get(), host, bytes, cudaMemcpyHostToDevice, stream_), "upload of a host table");
  return block;
}

// A quantized weight (F8_E4M3 or E2M1 of rank 2 or more) comes with room for its scales, which it never goes without
// here.
Tensor CudaBackend::empty(DType dtype, const Shape& shape) {
  return Tensor::make_with_scales(dtype, shape, [&](DType d, const Shape& s) {
    const size_t bytes = dtype_bytes(d, shape_numel(s));
    std::shared_ptr<void> block = scratch(bytes);
    if (poison_ && bytes > 0 && step_mode_ != StepMode::kPlan)
      cuda_check(cudaMemsetAsync(block.get(), 0xFF, bytes, stream_), "poisoning new memory");
    return Tensor(d, s, Device::kCuda, block.get(), block);
  });
}

Tensor CudaBackend::zeros(DType dtype, const Shape& shape) {
  Tensor t = empty(dtype, shape);
  if (t.nbytes() > 0 && step_mode_ != StepMode::kPlan)
    cuda_check(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream_), "zeroing new memory");
  return t;
}

// F32, BF16, integers and quantized weights with their scales keep their type (the products read FP8 and NVFP4 in
// their bytes); F16 is widened to F32, which every kernel reads.
Tensor CudaBackend::upload(const Tensor& host) {
  PLUMB_CHECK(host.device() == Device::kCpu, "upload: the tensor {} is already on the device", shape_str(host.shape()));
  PLUMB_CHECK(!in_step(), "upload: a recorded or replayed step may not upload a tensor");
  PLUMB_CHECK(host.dtype() != DType::kF8E4M3 || host.block_scales() != nullptr,
              "upload: an F8_E4M3 tensor {} needs its block scales", shape_str(host.shape()));
  PLUMB_CHECK(host.dtype() != DType::kE2M1 || (host.block_scales() != nullptr && host.group_scales() != nullptr),
              "upload: an E2M1 (NVFP4) tensor {} needs its block and group scales", shape_str(host.shape()));
  Tensor source = host;
  if (host.dtype() == DType::kF16) {
    source = Tensor::zeros(DType::kF32, host.shape());
    convert_to_f32(host.dtype(), host.data(), source.f32(), static_cast<size_t>(host.numel()));
  }
  Tensor t = empty(source.dtype(), source.shape());
  // A small tensor (ids, a table) is queued through the pinned staging buffer without waiting, so that uploading it
  // does not stall the host behind the device's queue (a drafting step plans its verification while the device
  // drafts); a large one (a weight) is copied and waited for.
  if (source.block_scales() == nullptr && source.nbytes() > 0 &&
      staging_->copy_to_device(t.data(), source.data(), source.nbytes()))
    return t;
  copy(source, t);
  return t;
}

Tensor CudaBackend::download(const Tensor& t) {
  PLUMB_CHECK(t.device() == Device::kCuda, "download: the tensor {} is not on the device", shape_str(t.shape()));
  Tensor out = Tensor::zeros(t.dtype(), t.shape());
  if (t.nbytes() > 0)
    cuda_check(cudaMemcpyAsync(out.data(), t.data(), t.nbytes(), cudaMemcpyDeviceToHost, stream_), "download");
  synchronize();
  return out;
}

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  PLUMB_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "copy: {} {} into {} {}",
              dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
  copy_block_scales(*this, src, dst);
  if (src.nbytes() == 0) return;
  // A step's copies between device tensors are kernels of its graph; one from or to the host would be a wait.
  PLUMB_CHECK(!in_step() || (src.device() == Device::kCuda && dst.device() == Device::kCuda),
              "copy: a recorded or replayed step may copy only between device tensors");
  if (step_mode_ == StepMode::kPlan) return;
  const cudaMemcpyKind kind = src.device() == Device::kCpu
                                  ? (dst.device() == Device::kCpu ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
                                  : (dst.device() == Device::kCpu ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
  cuda_check(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), kind, stream_), "copy");
  if (kind != cudaMemcpyDeviceToDevice) synchronize();
}

}  // namespace plumb
