// A kernel timeline of any CUDA program, for seeing where a replayed decode step's time goes inside the graph (ncu
// runs kernels one at a time; nsys does not run on the GPU machine). Preload it:
//   PLUMB_KERNEL_TRACE=trace.csv LD_PRELOAD=libplumb_kernel_trace.so plumb bench --device cuda ...
// and CUPTI's activity API records every kernel's start and end on the GPU, graph-launched ones included (the
// kernels of one graph launch share a correlation id). At exit it writes one CSV line a kernel, in start order:
//   start_ns,end_ns,correlation,graph,stream,grid,block,name
// (times from CUPTI's clock, names demangled). bench/trace/timeline.py turns it into per-step tables. CUPTI stamps
// each kernel's start and end by instrumenting the launch, which adds a little to every kernel, so the step a trace
// shows is somewhat longer than an untraced one; compare kernels and gaps within one trace.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint64_t start, end;
  uint32_t correlation, graph, stream;
  int32_t grid, block;
  std::string name;
};

std::mutex records_mutex;
std::vector<KernelRecord>* records = nullptr;  // leaked on purpose: read by the atexit writer after statics die
const char* out_path = nullptr;

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  cuptiGetResultString(result, &message);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, message ? message : "unknown error");
  std::exit(1);
}

std::string demangled(const char* name) {
  int status = 0;
  char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && text ? text : name;
  std::free(text);
  return result;
}

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  // Out of host memory: CUPTI takes an empty buffer as "drop these records", which the completion reports.
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* activity = nullptr;
  std::lock_guard<std::mutex> lock(records_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &activity) == CUPTI_SUCCESS) {
    if (activity->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(activity);
    records->push_back({k->start, k->end, k->correlationId, k->graphId, k->streamId, k->gridX * k->gridY * k->gridZ,
                        k->blockX * k->blockY * k->blockZ, demangled(k->name)});
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  if (dropped > 0) std::fprintf(stderr, "kernel_trace: CUPTI dropped %zu records\n", dropped);
  std::free(buffer);
}

void write_trace() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(records_mutex);
  // A process that ran no kernel (a wrapper the preload reached too, such as timeout) leaves the file alone.
  if (records->empty()) return;
  std::sort(records->begin(), records->end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  FILE* f = std::fopen(out_path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", out_path);
    return;
  }
  std::fprintf(f, "start_ns,end_ns,correlation,graph,stream,grid,block,name\n");
  for (const KernelRecord& r : *records) {
    std::string name = r.name;
    std::replace(name.begin(), name.end(), '"', '\'');
    std::fprintf(f, "%llu,%llu,%u,%u,%u,%d,%d,\"%s\"\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.correlation, r.graph, r.stream, r.grid, r.block,
                 name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels written to %s\n", records->size(), out_path);
}

__attribute__((constructor)) void start_trace() {
  out_path = std::getenv("PLUMB_KERNEL_TRACE");
  if (out_path == nullptr || *out_path == '\0') return;
  records = new std::vector<KernelRecord>();
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
  std::atexit(write_trace);
}

}  // namespace
