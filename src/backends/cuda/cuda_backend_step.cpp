// Step graphs (Backend::record_step, replay_step): a forward pass captured once as a CUDA graph and replayed.
//
// While a step is recorded or replayed, its device memory comes from an arena and its host tables from a pinned
// buffer, both handed out in call order from offset 0. Recording writes down the size of every block and table in
// order (the step's layout); a replay runs the same host code, checks each request against the layout, and so gets
// the same addresses the graph's kernels were captured with. Its tables, rebuilt for the new batch, then travel to
// the device in one copy before the graph runs. Nothing else of the step touches the host: the graph holds every
// kernel, copy and fill.
#include <cuda_runtime.h>

#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "core/error.h"

namespace plumb {

class CudaBackend::StepMemory {
 public:
  static constexpr size_t kChunkBytes = size_t{256} << 20;
  static constexpr size_t kTableBytes = size_t{8} << 20;
  static constexpr size_t kAlign = 256;

  explicit StepMemory(cudaStream_t stream) : stream_(stream) {
    cuda_check(cudaMalloc(&device_tables_, kTableBytes), "cudaMalloc of the step tables");
    for (int i = 0; i < 2; ++i) {
      cuda_check(cudaHostAlloc(&pinned_[i], kTableBytes, cudaHostAllocDefault), "cudaHostAlloc of the step tables");
      cuda_check(cudaEventCreateWithFlags(&uploaded_[i], cudaEventDisableTiming), "cudaEventCreate");
    }
  }
  ~StepMemory() {
    cudaStreamSynchronize(stream_);
    for (int i = 0; i < 2; ++i) {
      cudaEventDestroy(uploaded_[i]);
      cudaFreeHost(pinned_[i]);
    }
    cudaFree(device_tables_);
    for (const Chunk& c : chunks_) cudaFree(c.base);
  }
  StepMemory(const StepMemory&) = delete;
  StepMemory& operator=(const StepMemory&) = delete;

  // Starts a step: recording writes its layout into `layout`, replaying checks against it. Waits until the pinned
  // buffer this step fills has been copied out by the step that last filled it.
  void start(bool recording, std::vector<int64_t>* layout) {
    recording_ = recording;
    layout_ = layout;
    next_ = 0;
    chunk_ = 0;
    chunk_offset_ = 0;
    table_offset_ = 0;
    ++serial_;
    if (recording_) layout_->clear();
    half_ ^= 1;
    if (pending_[half_]) cuda_check(cudaEventSynchronize(uploaded_[half_]), "waiting for the step tables' buffer");
    pending_[half_] = false;
  }

  // A device block of `bytes` bytes for the step (its tensors and scratch).
  void* arena(size_t bytes) {
    expect(static_cast<int64_t>(bytes), "an arena block");
    bytes = round_up(bytes);
    while (chunk_ < chunks_.size() && chunk_offset_ + bytes > chunks_[chunk_].bytes) ++chunk_, chunk_offset_ = 0;
    if (chunk_ == chunks_.size()) {
      // Only a recording grows the arena (a replay asks for what its recording had); relaxed capture allows it.
      Chunk c{nullptr, std::max(kChunkBytes, bytes)};
      cuda_check(cudaMalloc(&c.base, c.bytes), "cudaMalloc of a step arena chunk");
      chunks_.push_back(c);
    }
    void* p = static_cast<char*>(chunks_[chunk_].base) + chunk_offset_;
    chunk_offset_ += bytes;
    return p;
  }

  // The device address where `bytes` host bytes will be once the step's tables are uploaded.
  void* table(const void* host, size_t bytes) {
    expect(-1 - static_cast<int64_t>(bytes), "a table");
    const size_t at = table_offset_;
    PLUMB_CHECK(at + bytes <= kTableBytes, "a step's host tables exceed {} bytes", kTableBytes);
    if (bytes > 0) std::memcpy(static_cast<char*>(pinned_[half_]) + at, host, bytes);
    table_offset_ = round_up(at + bytes);
    return static_cast<char*>(device_tables_) + at;
  }

  // Ends the step: a replay must have asked for everything its recording did. Queues the tables' one upload.
  void finish() {
    PLUMB_CHECK(recording_ || next_ == layout_->size(),
                "replay_step: the step made {} of the {} requests its recording made: its batch has another shape",
                next_, layout_->size());
    if (table_offset_ > 0) {
      cuda_check(cudaMemcpyAsync(device_tables_, pinned_[half_], table_offset_, cudaMemcpyHostToDevice, stream_),
                 "upload of a step's tables");
      cuda_check(cudaEventRecord(uploaded_[half_], stream_), "recording the step tables' upload");
      pending_[half_] = true;
    }
  }

  // Counts recorded and replayed steps: what a table cached within one step is keyed by.
  uint64_t serial() const { return serial_; }

 private:
  struct Chunk {
    void* base;
    size_t bytes;
  };
  static size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

  // Records request `entry` (a block's size, or a table's as -1 - size), or checks it against the recording.
  void expect(int64_t entry, const char* what) {
    if (recording_) {
      layout_->push_back(entry);
      return;
    }
    PLUMB_CHECK(next_ < layout_->size() && (*layout_)[next_] == entry,
                "replay_step: request {} of the step, {} of {} bytes, is not the recording's ({}): its batch has "
                "another shape",
                next_, what, entry < 0 ? -1 - entry : entry,
                next_ < layout_->size() ? std::to_string((*layout_)[next_]) : std::string("none"));
    ++next_;
  }

  cudaStream_t stream_;
  std::vector<Chunk> chunks_;
  size_t chunk_ = 0, chunk_offset_ = 0;
  void* device_tables_ = nullptr;
  void* pinned_[2] = {};
  cudaEvent_t uploaded_[2] = {};
  bool pending_[2] = {false, false};
  int half_ = 0;
  size_t table_offset_ = 0;
  bool recording_ = false;
  std::vector<int64_t>* layout_ = nullptr;
  size_t next_ = 0;
  uint64_t serial_ = 0;
};

void CudaBackend::StepMemoryDeleter::operator()(StepMemory* memory) const {
  delete memory;
}

namespace {

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(const CudaBackend* owner, cudaGraphExec_t exec, int64_t kernels, int64_t max_kv_pages,
                std::vector<int64_t> layout)
      : owner(owner), exec(exec), kernel_count(kernels), max_kv_pages(max_kv_pages), layout(std::move(layout)) {}
  ~CudaStepGraph() override { cudaGraphExecDestroy(exec); }
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;
  int64_t kernels() const override { return kernel_count; }

  const CudaBackend* owner;
  cudaGraphExec_t exec;
  int64_t kernel_count;
  int64_t max_kv_pages;
  std::vector<int64_t> layout;
};

}  // namespace

void CudaBackend::begin_step(StepMode mode, int64_t max_kv_pages, std::vector<int64_t>* layout) {
  PLUMB_CHECK(step_mode_ == StepMode::kEager, "a step is already being recorded or replayed");
  PLUMB_CHECK(max_kv_pages > 0, "a recorded step needs a page-table stride, got {}", max_kv_pages);
  if (!step_memory_) step_memory_.reset(new StepMemory(stream_));
  step_memory_->start(mode == StepMode::kRecord, layout);
  step_mode_ = mode;
  step_kv_pages_ = max_kv_pages;
}

void CudaBackend::end_step() {
  step_mode_ = StepMode::kEager;
  step_memory_->finish();
}

std::unique_ptr<StepGraph> CudaBackend::record_step(int64_t max_kv_pages, const std::function<void()>& step) {
  std::vector<int64_t> layout;
  const int64_t launches_before = kernel_launches();
  begin_step(StepMode::kRecord, max_kv_pages, &layout);
  cudaGraph_t graph = nullptr;
  // Relaxed: the arena may allocate while the stream is captured.
  cudaError_t status = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) {
    step_mode_ = StepMode::kEager;
    cuda_check(status, "beginning a step's capture");
  }
  try {
    step();
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    step_mode_ = StepMode::kEager;
    throw;
  }
  status = cudaStreamEndCapture(stream_, &graph);
  step_mode_ = StepMode::kEager;
  cuda_check(status, "ending a step's capture");
  cudaGraphExec_t exec = nullptr;
  status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  cuda_check(status, "instantiating a step's graph");
  auto recorded =
      std::make_unique<CudaStepGraph>(this, exec, kernel_launches() - launches_before, max_kv_pages, std::move(layout));
  step_memory_->finish();
  // The launches counted while capturing are the ones this first run of the graph makes.
  cuda_check(cudaGraphLaunch(exec, stream_), "launching a recorded step");
  return recorded;
}

void CudaBackend::replay_step(StepGraph& graph, const std::function<void()>& step) {
  auto* recorded = dynamic_cast<CudaStepGraph*>(&graph);
  PLUMB_CHECK(recorded != nullptr && recorded->owner == this, "replay_step: the graph was recorded by another backend");
  begin_step(StepMode::kPlan, recorded->max_kv_pages, &recorded->layout);
  try {
    step();
  } catch (...) {
    step_mode_ = StepMode::kEager;
    throw;
  }
  end_step();
  cuda_check(cudaGraphLaunch(recorded->exec, stream_), "replaying a recorded step");
  cuda_count_launches(recorded->kernel_count);
}

void* CudaBackend::step_arena(size_t bytes) {
  return step_memory_->arena(bytes);
}

void* CudaBackend::step_table(const void* host, size_t bytes) {
  return step_memory_->table(host, bytes);
}

uint64_t CudaBackend::step_serial() const {
  return in_step() ? step_memory_->serial() : 0;
}

}  // namespace plumb
