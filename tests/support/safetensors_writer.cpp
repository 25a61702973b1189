// Writes safetensors files for tests, laid out as the reference writer does: tensors back to back in the given order,
// the header padded with spaces to a multiple of 8 bytes, and a "__metadata__" entry as torch writes it. Broken files
// come from write_raw_safetensors with a header the test spells out itself.
#include "support/safetensors_writer.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace plumb::test {

NamedTensor make_tensor(const std::string& name, DType dtype, Shape shape, const std::vector<float>& values) {
  PLUMB_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "make_tensor {}: {} values for shape {}", name,
              values.size(), shape_str(shape));
  NamedTensor t{name, dtype, std::move(shape), std::vector<unsigned char>(values.size() * dtype_size(dtype))};
  for (size_t i = 0; i < values.size(); ++i) {
    unsigned char* dst = t.bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::kF32:
        std::memcpy(dst, &values[i], 4);
        break;
      case DType::kBF16: {
        const uint16_t bits = f32_to_bf16(values[i]);
        std::memcpy(dst, &bits, 2);
        break;
      }
      case DType::kF16: {
        const uint16_t bits = f32_to_f16(values[i]);
        std::memcpy(dst, &bits, 2);
        break;
      }
      default:
        PLUMB_FAIL("make_tensor {}: {} is not F32, BF16 or F16", name, dtype_name(dtype));
    }
  }
  return t;
}

SafetensorsImage build_safetensors(const std::vector<NamedTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  SafetensorsImage image;
  for (const NamedTensor& t : tensors) {
    const size_t expected = static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    PLUMB_CHECK(t.bytes.size() == expected, "build_safetensors {}: {} bytes for {} {}, expected {}", t.name,
                t.bytes.size(), dtype_name(t.dtype), shape_str(t.shape), expected);
    const size_t begin = image.data.size();
    image.data.insert(image.data.end(), t.bytes.begin(), t.bytes.end());
    header[t.name] = {
        {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {begin, image.data.size()}}};
  }
  image.header = header.dump();
  image.header.append((8 - image.header.size() % 8) % 8, ' ');
  return image;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors) {
  const SafetensorsImage image = build_safetensors(tensors);
  write_raw_safetensors(path, image.header, image.data);
}

void write_raw_safetensors(const std::string& path, const std::string& header, const std::vector<unsigned char>& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  PLUMB_CHECK(out.good(), "cannot open {} for writing", path);
  const uint64_t header_len = header.size();  // little-endian on every host plumb supports
  out.write(reinterpret_cast<const char*>(&header_len), sizeof header_len);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  PLUMB_CHECK(out.good(), "failed writing {}", path);
}

}  // namespace plumb::test
