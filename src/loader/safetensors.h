// Checkpoint tensors from safetensors files, memory-mapped: one model.safetensors, or shards listed in
// model.safetensors.index.json. Every header is validated against its file before any tensor is handed out; a bad
// file fails with a plumb::Error naming the file and the tensor or field at fault.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace plumb {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::string file;  // path of the .safetensors file that holds it
};

class CheckpointFiles {
 public:
  // Opens DIR/model.safetensors.index.json if present, else DIR/model.safetensors.
  static CheckpointFiles open(const std::string& model_dir);
  // Opens one .safetensors file.
  static CheckpointFiles open_file(const std::string& path);

  bool contains(const std::string& name) const;
  // Fails naming the tensor and the folder when absent.
  const TensorInfo& info(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  // A host tensor over the mapped bytes (copied only when the file leaves it misaligned for its dtype); the returned
  // tensor keeps the mapping alive.
  Tensor tensor(const std::string& name) const;
  const std::string& source() const { return source_; }

 private:
  struct Entry {
    TensorInfo info;
    std::shared_ptr<void> mapping;  // keeps the file mapped
    const unsigned char* data = nullptr;
    size_t nbytes = 0;
  };
  std::string source_;  // the folder or file, for messages
  std::map<std::string, Entry> entries_;
};

// Dequantizes a fine-grained FP8 weight: W[n, k] = float(Wq[n, k]) * scale_inv[n / block_rows, k / block_cols].
// weight: F8_E4M3 [N, K]; scale_inv: F32, BF16 or F16 [ceil(N / block_rows), ceil(K / block_cols)]. Returns F32 [N, K].
// `name` names the weight in error messages.
Tensor dequantize_fp8_blocks(const Tensor& weight, const Tensor& scale_inv, int64_t block_rows, int64_t block_cols,
                             const std::string& name);
// The checked multipliers of an FP8 weight [N, K] repeated for every row: F32 [N, ceil(K / block_cols)], row n holding
// scale_inv's row n / block_rows. Refuses what dequantize_fp8_blocks refuses.
Tensor fp8_row_scales(const Tensor& weight, const Tensor& scale_inv, int64_t block_rows, int64_t block_cols,
                      const std::string& name);
// Whether every kWeightScaleBlockK-wide K-slice (the products' slice) of a weight with k columns lies in one FP8
// block column: blocks a multiple of the slice wide, or one block across all of k.
bool fp8_blocks_follow_slices(int64_t k, int64_t block_cols);
// An FP8 weight kept in its bytes, with its multipliers per row and K-slice as block scales (Tensor::block_scales),
// for blocks that follow the slices (above; refused otherwise, naming the weight).
Tensor fp8_weight_with_scales(const Tensor& weight, const Tensor& scale_inv, int64_t block_rows, int64_t block_cols,
                              const std::string& name);

// An NVFP4 weight kept in its bytes: W[n, k] = e2m1(Wq[n, k]) * float(scale[n, k / 16]) * scale_2 (core/tensor.h's
// E2M1 weight, sharing the checkpoint's memory). weight: U8 [N, K / 2], element 2j in the low nibble of byte j and
// 2j + 1 in the high one; scale: F8_E4M3 [N, K / 16]; scale_2: F32, one value; group: the config's group size (16).
// Refuses shapes that disagree and NaN or infinite scales, naming the weight `name`.
Tensor nvfp4_weight(const Tensor& weight, const Tensor& scale, const Tensor& scale_2, int64_t group,
                    const std::string& name);

}  // namespace plumb
