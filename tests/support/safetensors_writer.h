// Writes safetensors files for tests: well-formed ones, and ones deliberately broken in a named way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace plumb::test {

struct NamedTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<unsigned char> bytes;  // raw little-endian data, numel * dtype_size bytes
};

// F32 values stored as `dtype` (F32, BF16 or F16; rounded to nearest even).
NamedTensor make_tensor(const std::string& name, DType dtype, Shape shape, const std::vector<float>& values);

// The header JSON text and data section of a safetensors file holding `tensors` in order.
struct SafetensorsImage {
  std::string header;
  std::vector<unsigned char> data;
};
SafetensorsImage build_safetensors(const std::vector<NamedTensor>& tensors);

// Writes 8-byte header length + header + data.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors);
void write_raw_safetensors(const std::string& path, const std::string& header, const std::vector<unsigned char>& data);

}  // namespace plumb::test
