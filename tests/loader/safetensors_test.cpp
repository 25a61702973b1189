// Tests for single safetensors files: values survive a write/read round trip in every dtype plumb reads (odd shapes,
// empty and scalar tensors, headers that leave the data misaligned), and each kind of broken file fails with a
// plumb::Error that names the file and the tensor or field at fault.
#include "loader/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "support/fixtures.h"
#include "support/safetensors_writer.h"

namespace plumb {
namespace {

using test::NamedTensor;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

template <typename T>
std::vector<unsigned char> bytes_of(const std::vector<T>& values) {
  std::vector<unsigned char> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<unsigned char> tensor_bytes(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data());
  return {p, p + t.nbytes()};
}

std::vector<float> ramp(size_t n, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * step - 5.0f;
  return v;
}

// One of each dtype, in shapes that divide into nothing: [3, 5, 7], [1, 3], a 0-element and a scalar. Ordered by
// falling element size, as the reference writer orders them, so that every tensor starts aligned for its dtype.
std::vector<NamedTensor> every_dtype() {
  return {
      NamedTensor{"i64", DType::kI64, {2}, bytes_of<int64_t>({INT64_MIN, 1})},
      test::make_tensor("f32", DType::kF32, {3, 5, 7}, ramp(105, 0.37f)),
      NamedTensor{"i32", DType::kI32, {7}, bytes_of<int32_t>({-3, 0, 1, INT32_MAX, INT32_MIN, 42, 7})},
      NamedTensor{"empty", DType::kF32, {4, 0, 3}, {}},
      test::make_tensor("scalar", DType::kF32, {}, {2.25f}),
      test::make_tensor("bf16", DType::kBF16, {1, 3}, {1.5f, -0.0078125f, 3.0e38f}),
      test::make_tensor("f16", DType::kF16, {5}, {65504.0f, -1.0f, 0.5f, 5.96046448e-8f, 0.0f}),
      NamedTensor{"fp8", DType::kF8E4M3, {2, 3}, {0x00, 0x01, 0x08, 0x7e, 0xfe, 0x38}},
  };
}

bool aligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data()) % dtype_size(t.dtype()) == 0;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& file) const { return dir_ + "/" + file; }

  // A file whose header is `header` verbatim, followed by `data_size` zero bytes.
  std::string write_header(const std::string& header, size_t data_size) const {
    const std::string p = path("bad.safetensors");
    test::write_raw_safetensors(p, header, std::vector<unsigned char>(data_size));
    return p;
  }

  std::string dir_ = test::scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
};

auto ErrorWith(const std::string& a, const std::string& b) {
  return ThrowsMessage<Error>(AllOf(HasSubstr(a), HasSubstr(b)));
}

TEST_F(SafetensorsTest, RoundTripsEveryDtype) {
  const std::vector<NamedTensor> written = every_dtype();
  test::write_safetensors(path("model.safetensors"), written);
  const CheckpointFiles files = CheckpointFiles::open_file(path("model.safetensors"));

  EXPECT_EQ(files.names(), (std::vector<std::string>{"bf16", "empty", "f16", "f32", "fp8", "i32", "i64", "scalar"}));
  for (const NamedTensor& w : written) {
    SCOPED_TRACE(w.name);
    ASSERT_TRUE(files.contains(w.name));
    const TensorInfo& info = files.info(w.name);
    EXPECT_EQ(info.name, w.name);
    EXPECT_EQ(info.dtype, w.dtype);
    EXPECT_EQ(info.shape, w.shape);
    EXPECT_EQ(info.file, path("model.safetensors"));
    const Tensor t = files.tensor(w.name);
    EXPECT_EQ(t.dtype(), w.dtype);
    EXPECT_EQ(t.shape(), w.shape);
    EXPECT_EQ(t.device(), Device::kCpu);
    EXPECT_TRUE(t.defined());
    EXPECT_TRUE(aligned(t));
    EXPECT_EQ(tensor_bytes(t), w.bytes);
  }
  EXPECT_FALSE(files.contains("f32 "));
  EXPECT_EQ(files.tensor("scalar").f32()[0], 2.25f);
  EXPECT_EQ(files.tensor("scalar").numel(), 1);
  EXPECT_EQ(files.tensor("empty").numel(), 0);
}

TEST_F(SafetensorsTest, AlignedTensorsAreViewsOfTheMapping) {
  test::write_safetensors(path("model.safetensors"), every_dtype());
  const CheckpointFiles files = CheckpointFiles::open_file(path("model.safetensors"));
  const Tensor a = files.tensor("f32");
  const Tensor b = files.tensor("f32");
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(a.owner().get(), files.tensor("i64").owner().get());
}

TEST_F(SafetensorsTest, MisalignedOffsetsAreCopiedIntoAlignedMemory) {
  // F32 at byte 2 and I64 at byte 6 of the data section, which itself starts aligned.
  const std::vector<NamedTensor> written = {
      NamedTensor{"h", DType::kF16, {1}, {0x00, 0x3c}},
      test::make_tensor("f", DType::kF32, {1}, {-7.5f}),
      NamedTensor{"q", DType::kI64, {1}, bytes_of<int64_t>({-123456789012345})},
  };
  test::write_safetensors(path("model.safetensors"), written);
  const CheckpointFiles files = CheckpointFiles::open_file(path("model.safetensors"));
  for (const NamedTensor& w : written) {
    const Tensor t = files.tensor(w.name);
    EXPECT_TRUE(aligned(t)) << w.name;
    EXPECT_EQ(tensor_bytes(t), w.bytes) << w.name;
  }
  EXPECT_EQ(files.tensor("f").f32()[0], -7.5f);
  EXPECT_EQ(files.tensor("q").data_as<int64_t>()[0], -123456789012345);
}

TEST_F(SafetensorsTest, TensorKeepsTheMappingAlive) {
  const std::vector<float> values = ramp(105, 0.37f);
  test::write_safetensors(path("model.safetensors"), every_dtype());
  Tensor t;
  {
    const CheckpointFiles files = CheckpointFiles::open_file(path("model.safetensors"));
    t = files.tensor("f32");
  }
  std::filesystem::remove(path("model.safetensors"));
  EXPECT_EQ(std::vector<float>(t.f32(), t.f32() + t.numel()), values);
}

TEST_F(SafetensorsTest, MisalignedHeaderStillReadsCorrectValues) {
  const std::vector<NamedTensor> written = every_dtype();
  for (const std::string pad : {" ", "  ", "   ", "       "}) {
    SCOPED_TRACE("extra padding: " + std::to_string(pad.size()));
    test::SafetensorsImage image = test::build_safetensors(written);
    image.header += pad;
    ASSERT_NE(image.header.size() % 8, 0u);
    test::write_raw_safetensors(path("odd.safetensors"), image.header, image.data);
    const CheckpointFiles files = CheckpointFiles::open_file(path("odd.safetensors"));
    for (const NamedTensor& w : written) {
      const Tensor t = files.tensor(w.name);
      EXPECT_TRUE(t.numel() == 0 || aligned(t)) << w.name;
      EXPECT_EQ(tensor_bytes(t), w.bytes) << w.name;
    }
    const Tensor f = files.tensor("f32");
    EXPECT_EQ(std::vector<float>(f.f32(), f.f32() + f.numel()), ramp(105, 0.37f));
  }
}

TEST_F(SafetensorsTest, OpensFolderWithOneFile) {
  test::write_safetensors(path("model.safetensors"), every_dtype());
  const CheckpointFiles files = CheckpointFiles::open(dir_);
  EXPECT_EQ(files.source(), dir_);
  EXPECT_EQ(files.info("i32").file, path("model.safetensors"));
  EXPECT_EQ(files.names().size(), every_dtype().size());
}

TEST_F(SafetensorsTest, EmptyTensorsMayShareOffsetsWithOthers) {
  const std::string p = write_header(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [4, 4]}})",
      8);
  const CheckpointFiles files = CheckpointFiles::open_file(p);
  EXPECT_EQ(files.tensor("e").numel(), 0);
}

TEST_F(SafetensorsTest, FolderWithNeitherFileFails) {
  EXPECT_THAT([&] { CheckpointFiles::open(dir_); },
              ThrowsMessage<Error>(
                  AllOf(HasSubstr(dir_), HasSubstr("model.safetensors.index.json"), HasSubstr("model.safetensors"))));
}

TEST_F(SafetensorsTest, MissingFileFails) {
  const std::string p = path("absent.safetensors");
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); }, ErrorWith(p, "No such file"));
}

TEST_F(SafetensorsTest, FolderInPlaceOfFileFails) {
  EXPECT_THAT([&] { CheckpointFiles::open_file(dir_); }, ErrorWith(dir_, "not a regular file"));
}

TEST_F(SafetensorsTest, EmptyFileFails) {
  const std::string p = path("empty.safetensors");
  std::ofstream(p).close();
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); }, ErrorWith(p, "header length"));
}

TEST_F(SafetensorsTest, FileCutInHeaderFails) {
  test::write_safetensors(path("model.safetensors"), every_dtype());
  for (const uintmax_t size : {uintmax_t{5}, uintmax_t{8}, uintmax_t{40}}) {
    SCOPED_TRACE(size);
    std::filesystem::resize_file(path("model.safetensors"), size);
    EXPECT_THAT([&] { CheckpointFiles::open_file(path("model.safetensors")); },
                ErrorWith(path("model.safetensors"), "header length"));
  }
}

TEST_F(SafetensorsTest, FileCutInDataFails) {
  // The writer lays tensors out in order, so the last one ("fp8") loses its bytes first.
  test::write_safetensors(path("model.safetensors"), every_dtype());
  std::filesystem::resize_file(path("model.safetensors"), std::filesystem::file_size(path("model.safetensors")) - 1);
  EXPECT_THAT([&] { CheckpointFiles::open_file(path("model.safetensors")); },
              ThrowsMessage<Error>(AllOf(HasSubstr(path("model.safetensors")), HasSubstr("'fp8'"),
                                         HasSubstr("data_offsets"), HasSubstr("truncated"))));
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFileFails) {
  const std::string p = path("long.safetensors");
  const uint64_t header_len = uint64_t{1} << 40;
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out << R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}})";
  out.close();
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); }, ErrorWith(p, "header length 1099511627776"));
}

TEST_F(SafetensorsTest, AbsurdHeaderLengthFails) {
  // A sparse file large enough that the length fits inside it, so only the size limit can reject it.
  const std::string p = path("huge.safetensors");
  const uint64_t header_len = (uint64_t{100} << 20) + 1;
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.close();
  std::filesystem::resize_file(p, header_len + 64);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); }, ErrorWith(p, "limit"));
}

TEST_F(SafetensorsTest, InvalidJsonFails) {
  const std::string p = write_header(R"({"a": {"dtype": "F32", "shape": [1], )", 4);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); }, ErrorWith(p, "invalid JSON"));
}

TEST_F(SafetensorsTest, HeaderThatIsNotAnObjectFails) {
  const std::string p = write_header("[1, 2, 3]", 0);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); }, ErrorWith(p, "not an object"));
}

TEST_F(SafetensorsTest, EntryThatIsNotAnObjectFails) {
  const std::string p = write_header(R"({"w": [0, 4]})", 4);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); }, ErrorWith(p, "'w'"));
}

TEST_F(SafetensorsTest, DuplicateTensorNameFails) {
  const std::string p = write_header(
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      8);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); }, ErrorWith(p, "\"w\" appears twice"));
}

TEST_F(SafetensorsTest, MetadataIsIgnoredButMustMapStringsToStrings) {
  const std::string good = write_header(
      R"({"__metadata__": {"format": "pt", "note": "x"}, "a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
      4);
  EXPECT_EQ(CheckpointFiles::open_file(good).names(), std::vector<std::string>{"a"});

  const std::string bad = write_header(R"({"__metadata__": {"format": 1}})", 0);
  EXPECT_THAT([&] { CheckpointFiles::open_file(bad); },
              ThrowsMessage<Error>(AllOf(HasSubstr(bad), HasSubstr("__metadata__"), HasSubstr("\"format\""))));
  const std::string not_object = write_header(R"({"__metadata__": "pt"})", 0);
  EXPECT_THAT([&] { CheckpointFiles::open_file(not_object); }, ErrorWith(not_object, "__metadata__"));
}

TEST_F(SafetensorsTest, UnknownDtypeFails) {
  const std::string p = write_header(R"({"w8": {"dtype": "F8_E5M2", "shape": [4], "data_offsets": [0, 4]}})", 4);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); },
              ThrowsMessage<Error>(AllOf(HasSubstr(p), HasSubstr("'w8'"), HasSubstr("\"F8_E5M2\""))));
  const std::string missing = write_header(R"({"w8": {"shape": [4], "data_offsets": [0, 4]}})", 4);
  EXPECT_THAT([&] { CheckpointFiles::open_file(missing); },
              ThrowsMessage<Error>(AllOf(HasSubstr(missing), HasSubstr("'w8'"), HasSubstr("\"dtype\""))));
}

TEST_F(SafetensorsTest, BadShapeFails) {
  const char* const shapes[] = {
      "[-1, 4]", "[2.5]", "[\"2\"]", "4", "[4294967296, 4294967296]", "[9223372036854775808]"};
  for (const char* shape : shapes) {
    SCOPED_TRACE(shape);
    const std::string p = write_header(
        fmt::format(R"({{"bad_shape": {{"dtype": "F32", "shape": {}, "data_offsets": [0, 16]}}}})", shape), 16);
    EXPECT_THAT([&] { CheckpointFiles::open_file(p); },
                ThrowsMessage<Error>(AllOf(HasSubstr(p), HasSubstr("'bad_shape'"), HasSubstr("shape"))));
  }
}

TEST_F(SafetensorsTest, ShapeWhoseByteCountOverflowsFails) {
  const std::string p =
      write_header(R"({"big": {"dtype": "F32", "shape": [4611686018427387904, 2], "data_offsets": [0, 16]}})", 16);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); },
              ThrowsMessage<Error>(AllOf(HasSubstr(p), HasSubstr("'big'"), HasSubstr("overflows"))));
}

TEST_F(SafetensorsTest, BadDataOffsetsFail) {
  const char* const offsets[] = {"[0, 1000]", "[12, 4]", "[0]", "[0, 4, 8]", "[-4, 4]", "\"0-4\""};
  for (const char* range : offsets) {
    SCOPED_TRACE(range);
    const std::string p =
        write_header(fmt::format(R"({{"t": {{"dtype": "F32", "shape": [1], "data_offsets": {}}}}})", range), 16);
    EXPECT_THAT([&] { CheckpointFiles::open_file(p); },
                ThrowsMessage<Error>(AllOf(HasSubstr(p), HasSubstr("'t'"), HasSubstr("data_offsets"))));
  }
  const std::string missing = write_header(R"({"t": {"dtype": "F32", "shape": [1]}})", 16);
  EXPECT_THAT([&] { CheckpointFiles::open_file(missing); }, ErrorWith(missing, "data_offsets"));
}

TEST_F(SafetensorsTest, OffsetsPastEndOfDataFail) {
  const std::string p = write_header(R"({"tail": {"dtype": "BF16", "shape": [3], "data_offsets": [12, 18]}})", 16);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); },
              ThrowsMessage<Error>(
                  AllOf(HasSubstr(p), HasSubstr("'tail'"), HasSubstr("[12, 18]"), HasSubstr("16-byte data section"))));
}

TEST_F(SafetensorsTest, SizeMismatchFails) {
  const std::string p = write_header(R"({"m": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24);
  EXPECT_THAT([&] { CheckpointFiles::open_file(p); },
              ThrowsMessage<Error>(
                  AllOf(HasSubstr(p), HasSubstr("'m'"), HasSubstr("needs 24 bytes"), HasSubstr("hold 20 bytes"))));
}

TEST_F(SafetensorsTest, OverlappingTensorsFail) {
  const std::string p = write_header(
      R"({"first": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "mid": {"dtype": "F32", "shape": [1], "data_offsets": [16, 20]},
          "second": {"dtype": "I32", "shape": [4], "data_offsets": [8, 24]}})",
      24);
  EXPECT_THAT(
      [&] { CheckpointFiles::open_file(p); },
      ThrowsMessage<Error>(AllOf(HasSubstr(p), HasSubstr("'first'"), HasSubstr("'second'"), HasSubstr("overlap"))));
}

TEST_F(SafetensorsTest, MissingTensorFails) {
  test::write_safetensors(path("model.safetensors"), every_dtype());
  const CheckpointFiles files = CheckpointFiles::open_file(path("model.safetensors"));
  EXPECT_THAT([&] { files.info("model.norm.weight"); }, ErrorWith(path("model.safetensors"), "'model.norm.weight'"));
  EXPECT_THAT([&] { files.tensor("model.norm.weight"); }, ErrorWith(path("model.safetensors"), "'model.norm.weight'"));
  const CheckpointFiles folder = CheckpointFiles::open(dir_);
  EXPECT_THAT([&] { folder.info("lm_head.weight"); }, ErrorWith(dir_, "'lm_head.weight'"));
}

}  // namespace
}  // namespace plumb
