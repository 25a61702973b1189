// NumPy .npy files (format version 1.0, little-endian, C order): how plumb hands arrays to Python and reads the
// reference arrays its fixture scripts write.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace plumb {

// Writes a float32 array of the given shape.
void write_npy_f32(const std::string& path, const float* data, const Shape& shape);

// Reads a float32 (<f4) or float64 (<f8, converted) array; fails with a message naming the file otherwise.
struct NpyArray {
  Shape shape;
  std::vector<float> values;
};
NpyArray read_npy_f32(const std::string& path);

}  // namespace plumb
