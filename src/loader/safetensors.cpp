// Reads safetensors checkpoints. Each file is mapped once, read-only, and its header is checked against its bytes
// (known dtypes, non-negative shapes, offsets inside the data section that match the shape, no overlaps, no
// duplicate names) before any tensor is handed out. A sharded checkpoint is accepted only when its
// model.safetensors.index.json and its shards agree tensor for tensor. Tensors handed out are views into the mapping
// and share ownership of it.
#include "loader/safetensors.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "core/error.h"
#include "core/files.h"
#include "core/json_depth.h"

namespace plumb {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The format stores integers little-endian; plumb reads them in place.
static_assert(std::endian::native == std::endian::little, "plumb reads safetensors in place on little-endian hosts");

// Real headers are a few MB at most (~1 MB for the 80B model's largest shard); anything larger is a corrupt length.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr char kSingleFileName[] = "model.safetensors";
constexpr char kIndexFileName[] = "model.safetensors.index.json";

std::string errno_text() {
  return std::generic_category().message(errno);
}

struct MappedFile {
  std::shared_ptr<void> owner;  // munmaps when the last tensor view is gone
  const unsigned char* bytes = nullptr;
  size_t size = 0;
};

MappedFile map_file(const std::string& path) {
  const int fd = open_regular_file(path);  // a FIFO is refused here instead of blocking open()
  // The mapping outlives the descriptor, so it is closed on every way out of this function.
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  PLUMB_CHECK(::fstat(fd, &st) == 0, "cannot stat {}: {}", path, errno_text());
  const auto size = static_cast<size_t>(st.st_size);
  PLUMB_CHECK(size >= 8, "{} is {} bytes, too short to hold the 8-byte header length", path, size);
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  PLUMB_CHECK(addr != MAP_FAILED, "cannot map {}: {}", path, errno_text());
  std::shared_ptr<void> owner(addr, [size](void* p) { ::munmap(p, size); });
  return {std::move(owner), static_cast<const unsigned char*>(addr), size};
}

// Parses `text` as JSON, failing (naming `path`) on a syntax error or on a key repeated within one object, which
// nlohmann would otherwise resolve silently to its last value.
json parse_json(std::string_view text, const std::string& path) {
  check_json_depth(text, path);
  std::vector<std::set<std::string>> open_objects;
  const json::parser_callback_t reject_duplicate_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      PLUMB_CHECK(open_objects.back().insert(key).second, "{}: key \"{}\" appears twice in one JSON object", path, key);
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), reject_duplicate_keys);
  } catch (const json::exception& e) {
    PLUMB_FAIL("{}: invalid JSON: {}", path, e.what());
  }
}

// One tensor of a parsed file, pointing into the file's mapping.
struct FileTensor {
  TensorInfo info;
  const unsigned char* data = nullptr;
  size_t nbytes = 0;
  uint64_t begin = 0, end = 0;  // data_offsets, for overlap messages
};

struct ParsedFile {
  MappedFile map;
  std::vector<FileTensor> tensors;
};

// Bytes a tensor of this dtype and shape needs, or fails naming the tensor when the count does not fit in 64 bits.
uint64_t tensor_bytes(DType dtype, const Shape& shape, const std::string& name, const std::string& path) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : shape) {
    PLUMB_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes),
                "tensor '{}' in {}: shape {} is too large (its byte count overflows 64 bits)", name, path,
                shape_str(shape));
  }
  return bytes;
}

Shape parse_shape(const json& entry, const std::string& name, const std::string& path) {
  const auto it = entry.find("shape");
  PLUMB_CHECK(it != entry.end() && it->is_array(), "tensor '{}' in {}: \"shape\" is missing or not an array", name,
              path);
  Shape shape;
  for (const json& d : *it) {
    // nlohmann parses non-negative integers as unsigned; negative ones and floats fail here.
    PLUMB_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
                "tensor '{}' in {}: \"shape\" {} holds {}, not a non-negative integer", name, path, it->dump(),
                d.dump());
    shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  return shape;
}

FileTensor parse_entry(const std::string& name, const json& entry, const MappedFile& map, uint64_t data_start,
                       const std::string& path) {
  PLUMB_CHECK(entry.is_object(), "tensor '{}' in {}: header entry is not a JSON object", name, path);
  FileTensor t;
  t.info.name = name;
  t.info.file = path;

  const auto dtype_it = entry.find("dtype");
  PLUMB_CHECK(dtype_it != entry.end() && dtype_it->is_string(),
              "tensor '{}' in {}: \"dtype\" is missing or not a string", name, path);
  const auto& dtype_text = dtype_it->get_ref<const std::string&>();
  PLUMB_CHECK(parse_dtype(dtype_text, &t.info.dtype),
              "tensor '{}' in {}: dtype \"{}\" is not one plumb reads (F32, F16, BF16, F8_E4M3, I32, I64)", name, path,
              dtype_text);
  t.info.shape = parse_shape(entry, name, path);

  const auto offsets_it = entry.find("data_offsets");
  PLUMB_CHECK(offsets_it != entry.end() && offsets_it->is_array() && offsets_it->size() == 2 &&
                  (*offsets_it)[0].is_number_unsigned() && (*offsets_it)[1].is_number_unsigned(),
              "tensor '{}' in {}: \"data_offsets\" must be [begin, end] of non-negative integers, got {}", name, path,
              offsets_it == entry.end() ? "none" : offsets_it->dump());
  t.begin = (*offsets_it)[0].get<uint64_t>();
  t.end = (*offsets_it)[1].get<uint64_t>();
  const uint64_t data_size = map.size - data_start;
  PLUMB_CHECK(t.begin <= t.end, "tensor '{}' in {}: data_offsets [{}, {}] end before they begin", name, path, t.begin,
              t.end);
  PLUMB_CHECK(t.end <= data_size,
              "tensor '{}' in {}: data_offsets [{}, {}] run past the {}-byte data section (is the file truncated?)",
              name, path, t.begin, t.end, data_size);
  const uint64_t expected = tensor_bytes(t.info.dtype, t.info.shape, name, path);
  PLUMB_CHECK(t.end - t.begin == expected,
              "tensor '{}' in {}: {} {} needs {} bytes, but data_offsets [{}, {}] hold {} bytes", name, path,
              dtype_text, shape_str(t.info.shape), expected, t.begin, t.end, t.end - t.begin);
  t.data = map.bytes + data_start + t.begin;
  t.nbytes = static_cast<size_t>(expected);
  return t;
}

ParsedFile parse_file(const std::string& path) {
  ParsedFile file{map_file(path), {}};
  const MappedFile& map = file.map;
  uint64_t header_len;
  std::memcpy(&header_len, map.bytes, sizeof header_len);
  PLUMB_CHECK(header_len <= map.size - 8,
              "{}: header length {} bytes runs past the end of the {}-byte file (is the file truncated?)", path,
              header_len, map.size);
  PLUMB_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} bytes is over the {}-byte limit", path, header_len,
              kMaxHeaderBytes);
  const json header =
      parse_json(std::string_view(reinterpret_cast<const char*>(map.bytes) + 8, static_cast<size_t>(header_len)), path);
  PLUMB_CHECK(header.is_object(), "{}: header is JSON but not an object", path);

  const uint64_t data_start = 8 + header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      // Free-form string pairs ({"format": "pt"}); nothing plumb needs, but a malformed one means a broken writer.
      PLUMB_CHECK(entry.is_object(), "{}: \"__metadata__\" is not a JSON object", path);
      for (const auto& [key, value] : entry.items()) {
        PLUMB_CHECK(value.is_string(), "{}: \"__metadata__\" value for \"{}\" is {}, not a string", path, key,
                    value.dump());
      }
      continue;
    }
    file.tensors.push_back(parse_entry(name, entry, map, data_start, path));
  }

  // Empty tensors occupy no bytes, so they can sit anywhere; every other pair must be disjoint. Sorted by start, the
  // ranges are disjoint exactly when each ends at or before the next one begins.
  std::vector<const FileTensor*> ranges;
  for (const FileTensor& t : file.tensors) {
    if (t.end > t.begin) ranges.push_back(&t);
  }
  std::sort(ranges.begin(), ranges.end(), [](const FileTensor* a, const FileTensor* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const FileTensor& a = *ranges[i - 1];
    const FileTensor& b = *ranges[i];
    PLUMB_CHECK(a.end <= b.begin, "{}: tensors '{}' (data_offsets [{}, {}]) and '{}' (data_offsets [{}, {}]) overlap",
                path, a.info.name, a.begin, a.end, b.info.name, b.begin, b.end);
  }
  return file;
}

bool path_exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// The index's weight_map grouped by shard file name: {shard: [tensor, ...]}.
std::map<std::string, std::vector<std::string>> read_index(const std::string& index_path) {
  const json index = parse_json(read_regular_file(index_path), index_path);
  PLUMB_CHECK(index.is_object(), "{}: not a JSON object", index_path);
  const auto map_it = index.find("weight_map");
  PLUMB_CHECK(map_it != index.end() && map_it->is_object(), "{}: \"weight_map\" is missing or not an object",
              index_path);
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [tensor, shard] : map_it->items()) {
    PLUMB_CHECK(shard.is_string(), "{}: weight_map entry for tensor '{}' is {}, not a file name", index_path, tensor,
                shard.dump());
    const auto& file = shard.get_ref<const std::string&>();
    // Without a '/', only "." and ".." could name something outside the checkpoint folder.
    PLUMB_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
                "{}: weight_map entry for tensor '{}' names shard \"{}\", which is not a file name inside the folder",
                index_path, tensor, file);
    shards[file].push_back(tensor);
  }
  return shards;
}

}  // namespace

CheckpointFiles CheckpointFiles::open_file(const std::string& path) {
  CheckpointFiles files;
  files.source_ = path;
  ParsedFile parsed = parse_file(path);
  for (FileTensor& t : parsed.tensors) {
    const std::string name = t.info.name;
    files.entries_[name] = Entry{std::move(t.info), parsed.map.owner, t.data, t.nbytes};
  }
  return files;
}

CheckpointFiles CheckpointFiles::open(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path index_path = dir / kIndexFileName;
  if (!path_exists(index_path)) {
    PLUMB_CHECK(path_exists(dir / kSingleFileName), "{}: found neither {} nor {}", model_dir, kIndexFileName,
                kSingleFileName);
    CheckpointFiles files = open_file((dir / kSingleFileName).string());
    files.source_ = model_dir;
    return files;
  }

  CheckpointFiles files;
  files.source_ = model_dir;
  const std::string index = index_path.string();
  for (const auto& [shard, listed] : read_index(index)) {
    const std::string shard_path = (dir / shard).string();
    PLUMB_CHECK(path_exists(shard_path), "{} lists tensor '{}' in shard {}, but {} does not exist", index, listed[0],
                shard, shard_path);
    ParsedFile parsed = parse_file(shard_path);
    std::set<std::string> in_shard;
    for (const FileTensor& t : parsed.tensors) in_shard.insert(t.info.name);
    const std::set<std::string> in_index(listed.begin(), listed.end());
    for (const std::string& name : listed) {
      PLUMB_CHECK(in_shard.count(name), "{} lists tensor '{}' in shard {}, but {} does not hold it", index, name, shard,
                  shard_path);
    }
    for (FileTensor& t : parsed.tensors) {
      PLUMB_CHECK(in_index.count(t.info.name), "{} holds tensor '{}', but {} does not list it for that shard",
                  shard_path, t.info.name, index);
      const std::string name = t.info.name;
      files.entries_[name] = Entry{std::move(t.info), parsed.map.owner, t.data, t.nbytes};
    }
  }
  return files;
}

bool CheckpointFiles::contains(const std::string& name) const {
  return entries_.count(name) != 0;
}

const TensorInfo& CheckpointFiles::info(const std::string& name) const {
  const auto it = entries_.find(name);
  PLUMB_CHECK(it != entries_.end(), "tensor '{}' not found in {}", name, source_);
  return it->second.info;
}

std::vector<std::string> CheckpointFiles::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

Tensor CheckpointFiles::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const Entry& entry = entries_.find(name)->second;
  // A header whose length is not a multiple of 8 (the writer's padding is only a convention) shifts every tensor off
  // its natural alignment; such tensors are copied so callers may read them as typed arrays.
  if (entry.nbytes != 0 && reinterpret_cast<uintptr_t>(entry.data) % dtype_size(ti.dtype) != 0) {
    Tensor copy = Tensor::zeros(ti.dtype, ti.shape);
    std::memcpy(copy.data(), entry.data, entry.nbytes);
    return copy;
  }
  // The mapping is read-only: the view's memory must not be written.
  return Tensor(ti.dtype, ti.shape, Device::kCpu, const_cast<unsigned char*>(entry.data), entry.mapping);
}

}  // namespace plumb
