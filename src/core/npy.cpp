#include "core/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

#include "core/error.h"

namespace plumb {

void write_npy_f32(const std::string& path, const float* data, const Shape& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i)
    dims += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + header length (2) + header + '\n' must be a multiple of 64.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  PLUMB_CHECK(out.good(), "cannot open {} for writing", path);
  const uint16_t header_len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&header_len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(shape_numel(shape) * sizeof(float)));
  PLUMB_CHECK(out.good(), "failed writing {}", path);
}

NpyArray read_npy_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PLUMB_CHECK(in.good(), "cannot open {}", path);
  char magic[10];
  in.read(magic, 10);
  PLUMB_CHECK(in.gcount() == 10 && std::memcmp(magic, "\x93NUMPY\x01\x00", 8) == 0, "{}: not a version-1 .npy file",
              path);
  uint16_t header_len;
  std::memcpy(&header_len, magic + 8, 2);
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  PLUMB_CHECK(in.gcount() == header_len, "{}: truncated header", path);
  std::smatch m;
  PLUMB_CHECK(std::regex_search(header, m, std::regex("'descr': '([<>|][a-z][0-9])'")), "{}: no descr", path);
  const std::string descr = m[1];
  PLUMB_CHECK(descr == "<f4" || descr == "<f8", "{}: dtype {} is not float32 or float64", path, descr);
  PLUMB_CHECK(header.find("'fortran_order': False") != std::string::npos, "{}: Fortran order is not supported", path);
  PLUMB_CHECK(std::regex_search(header, m, std::regex("'shape': \\(([0-9, ]*)\\)")), "{}: no shape", path);
  NpyArray array;
  const std::string dims = m[1];
  const std::regex number("[0-9]+");
  std::sregex_iterator it(dims.begin(), dims.end(), number), end;
  for (; it != end; ++it) array.shape.push_back(std::stoll(it->str()));
  const size_t n = static_cast<size_t>(shape_numel(array.shape));
  array.values.resize(n);
  if (descr == "<f4") {
    in.read(reinterpret_cast<char*>(array.values.data()), static_cast<std::streamsize>(n * 4));
    PLUMB_CHECK(static_cast<size_t>(in.gcount()) == n * 4, "{}: truncated data", path);
  } else {
    std::vector<double> wide(n);
    in.read(reinterpret_cast<char*>(wide.data()), static_cast<std::streamsize>(n * 8));
    PLUMB_CHECK(static_cast<size_t>(in.gcount()) == n * 8, "{}: truncated data", path);
    for (size_t i = 0; i < n; ++i) array.values[i] = static_cast<float>(wide[i]);
  }
  return array;
}

}  // namespace plumb
