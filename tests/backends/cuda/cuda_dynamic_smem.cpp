// Prints the dynamic shared memory each CUDA kernel launch asks for, one line per kernel and configuration:
//   FILE dynamic KERNEL CONFIG smem=BYTES
// ptxas reports static shared memory only, so tests/backends/cuda/cuda_resources.sh records these lines beside its numbers. The
// bytes come from the functions the launchers themselves call (kernels/*.h), never from a copy; where they depend on
// the model, they are printed for Qwen3-Next-80B-A3B's shapes. Runs on the host alone: it calls no CUDA API.
#include <cstdio>
#include <string>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/experts.h"
#include "backends/cuda/kernels/gdn.h"
#include "backends/cuda/kernels/linear.h"
#include "backends/cuda/kernels/sample.h"

namespace {

using plumb::cuda::LinearShape;

constexpr int kExperts = 512;  // Qwen3-Next-80B-A3B: routed experts, experts per token, key head dim
constexpr int kTopK = 10;
constexpr int kKeyDim = 128;

void print(const char* file, const char* kernel, const std::string& config, long long bytes) {
  std::printf("%s dynamic %s %s smem=%lld\n", file, kernel, config.c_str(), bytes);
}

}  // namespace

int main() {
  // Every padded head dim attention_kernel is instantiated for.
  for (const int head_dim : {16, 32, 64, 128, 256}) {
    print("attention.cu", "attention_kernel", "head_dim=" + std::to_string(head_dim),
          static_cast<long long>(plumb::cuda::attention_smem_bytes(head_dim)));
  }
  print("experts.cu", "moe_group_kernel", "experts=" + std::to_string(kExperts),
        plumb::cuda::moe_group_smem_bytes(kExperts));
  print("sample.cu", "moe_route_kernel", "experts=" + std::to_string(kExperts) + ",top_k=" + std::to_string(kTopK),
        static_cast<long long>(plumb::cuda::moe_route_smem_bytes(kExperts, kTopK)));
  const std::string key_dim = "key_dim=" + std::to_string(kKeyDim);
  print("gdn_chunked_prepare.cu", "gdn_chunk_prepare_kernel", key_dim,
        static_cast<long long>(plumb::cuda::gdn_chunk_prepare_smem_bytes(kKeyDim)));
  print("gdn_chunked.cu", "gdn_chunk_state_kernel<32>", key_dim,
        static_cast<long long>(plumb::cuda::gdn_chunk_state_smem_bytes<32>(kKeyDim)));
  print("gdn_chunked.cu", "gdn_chunk_state_kernel<8>", key_dim,
        static_cast<long long>(plumb::cuda::gdn_chunk_state_smem_bytes<8>(kKeyDim)));

  struct Shape {
    LinearShape shape;
    const char* name;
    bool stream;  // a weight-streaming shape (linear_stream.cu) rather than a tiled one (linear.cu)
  };
  for (const Shape& s :
       {Shape{LinearShape::kStream8, "kStream8", true}, Shape{LinearShape::kStream16, "kStream16", true},
        Shape{LinearShape::kStream32, "kStream32", true}, Shape{LinearShape::kStream64, "kStream64", true},
        Shape{LinearShape::kTiled64, "kTiled64", false}, Shape{LinearShape::kTiled128, "kTiled128", false}}) {
    const std::string config = std::string("shape=") + s.name;
    print(s.stream ? "linear_stream.cu" : "linear.cu", s.stream ? "linear_stream_kernel" : "linear_bf16_kernel", config,
          plumb::cuda::linear_smem_bytes(s.shape));
    // The ring kernel at the most rows it takes: what its launch allows the kernel, and its largest launch.
    const int rows = plumb::cuda::linear_tile_rows(s.shape);
    const int ring = plumb::cuda::linear_ring_smem_bytes(s.shape, rows);
    if (ring > 0)
      print("linear_stream.cu", "linear_stream_ring_kernel", config + ",rows=" + std::to_string(rows), ring);
  }
  print("linear_wgmma.cu", "linear_wgmma_kernel", "shape=kWgmma128",
        plumb::cuda::linear_smem_bytes(LinearShape::kWgmma128));
  return 0;
}
