// Benchmark of the GPU token draw (Backend::sample_tokens on the CUDA backend) on a vocabulary of Qwen3-Next's size,
// beside the CPU reference's draw of the same rows: random logits (normal, spread 3, as plumb_sampler_bench), per
// sampling setting and row count. The floor of a draw is reading its rows' logits once at the copy bandwidth
// measured in the same run. Every GPU id is compared with the CPU reference's (CpuBackend::sample_tokens, the same
// draws): they agree except where a cut lies within about 1e-7 of a cumulative weight (sample.cu), so the count of
// agreeing rows is printed, and a greedy row that differs fails the run. A second table draws one row of logits of
// other distributions (normal of spreads 0.01 to 100, and rounded to BF16), where the draw's cost changes with how
// the logits crowd its histogram bins and tie. Prints the tables; with a path, writes JSON.
//
// Usage: plumb_gpu_sampler_bench [out.json] [--repeat N]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kVocab = 248320;
constexpr int64_t kMaxRows = 64;
constexpr int kCallsPerSample = 10;  // back-to-back draws between two synchronizations

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of fn, the median of `repeat` samples of kCallsPerSample calls each, after one untimed call.
template <typename Fn>
double time_calls(plumb::Backend& be, int repeat, Fn&& fn) {
  fn();
  std::vector<double> samples;
  for (int r = 0; r < repeat; ++r) {
    be.synchronize();
    const auto start = Clock::now();
    for (int i = 0; i < kCallsPerSample; ++i) fn();
    be.synchronize();
    samples.push_back(std::chrono::duration<double>(Clock::now() - start).count() / kCallsPerSample);
  }
  return median(samples);
}

int run(const std::string& json_path, int repeat) {
  plumb::CudaBackend gpu;
  plumb::CpuBackend cpu;
  std::vector<float> values(static_cast<size_t>(kMaxRows * kVocab));  // [rows, vocab]
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : values) v = normal(rng);
  const plumb::Tensor host_logits = plumb::Tensor::from_f32(values, {kMaxRows, kVocab});  // [rows, vocab]
  const plumb::Tensor logits = gpu.upload(host_logits);                                   // [rows, vocab]

  // The copy bandwidth: 2 × bytes of a 1 GiB device-to-device copy over its time.
  const int64_t copy_elements = int64_t{1} << 28;
  plumb::Tensor src = gpu.zeros(plumb::DType::kF32, {copy_elements});  // [n]
  plumb::Tensor dst = gpu.empty(plumb::DType::kF32, {copy_elements});  // [n]
  const double copy_s = time_calls(gpu, 5, [&] { gpu.copy(src, dst); });
  const double copy_bandwidth = 2.0 * static_cast<double>(src.nbytes()) / copy_s;

  struct Setting {
    const char* name;
    plumb::TokenDraw draw;
  };
  const Setting settings[] = {
      {"greedy", {}},
      {"temperature 0.7", {.temperature = 0.7f, .seed = 3}},
      {"temperature 0.7, top-p 0.9", {.temperature = 0.7f, .top_p = 0.9f, .seed = 3}},
      {"temperature 0.7, top-k 50", {.temperature = 0.7f, .top_k = 50, .seed = 3}},
      {"temperature 0.7, top-k 50, top-p 0.9", {.temperature = 0.7f, .top_k = 50, .top_p = 0.9f, .seed = 3}},
  };
  const int64_t row_counts[] = {1, 16, 64};
  nlohmann::ordered_json out;
  out["vocab"] = kVocab;
  out["copy_bandwidth_bytes_per_s"] = copy_bandwidth;
  std::printf("vocabulary %lld, copy bandwidth %.0f GB/s, median of %d samples of %d draws\n",
              static_cast<long long>(kVocab), copy_bandwidth / 1e9, repeat, kCallsPerSample);
  std::printf("%-38s %5s %12s %10s %9s %14s %10s\n", "setting", "rows", "GPU us", "floor us", "of floor",
              "CPU ref us/row", "same ids");
  bool greedy_differs = false;
  for (const Setting& s : settings) {
    for (const int64_t rows : row_counts) {
      std::vector<plumb::TokenDraw> draws(static_cast<size_t>(rows), s.draw);
      for (int64_t r = 0; r < rows; ++r) draws[r].step = static_cast<uint64_t>(r);
      const plumb::Tensor view = logits.rows(0, rows);  // [rows, vocab]
      plumb::Tensor ids = gpu.empty(plumb::DType::kI32, {rows});
      const double gpu_s = time_calls(gpu, repeat, [&] { gpu.sample_tokens(view, draws, ids); });
      const plumb::Tensor gpu_ids = gpu.download(ids);  // [rows]

      const plumb::Tensor host_view = host_logits.rows(0, rows);  // [rows, vocab]
      plumb::Tensor cpu_ids = plumb::Tensor::zeros(plumb::DType::kI32, {rows});
      const auto cpu_start = Clock::now();
      cpu.sample_tokens(host_view, draws, cpu_ids);
      const double cpu_s = std::chrono::duration<double>(Clock::now() - cpu_start).count() / static_cast<double>(rows);
      int64_t same = 0;
      for (int64_t r = 0; r < rows; ++r) same += gpu_ids.data_as<int32_t>()[r] == cpu_ids.data_as<int32_t>()[r] ? 1 : 0;
      greedy_differs = greedy_differs || (s.draw.temperature == 0.0f && same != rows);

      const double floor_s = static_cast<double>(rows * kVocab) * sizeof(float) / copy_bandwidth;
      std::printf("%-38s %5lld %12.1f %10.1f %8.1f%% %14.1f %6lld/%lld\n", s.name, static_cast<long long>(rows),
                  gpu_s * 1e6, floor_s * 1e6, 100.0 * floor_s / gpu_s, cpu_s * 1e6, static_cast<long long>(same),
                  static_cast<long long>(rows));
      out["draws"].push_back({{"setting", s.name},
                              {"rows", rows},
                              {"gpu_median_s", gpu_s},
                              {"floor_s", floor_s},
                              {"of_floor", floor_s / gpu_s},
                              {"cpu_reference_s_per_row", cpu_s},
                              {"same_ids", same}});
    }
  }
  // One row drawn from logits of other shapes: normal of several spreads, and values rounded to BF16 (ties by the
  // hundred, as logits that passed through 16-bit storage have).
  std::printf("\none row, temperature 0.7, top-p 0.9, by the logits' distribution\n%-38s %12s %10s\n", "logits",
              "GPU us", "same ids");
  const plumb::TokenDraw nucleus{.temperature = 0.7f, .top_p = 0.9f, .seed = 3};
  for (const float spread : {0.01f, 0.1f, 1.0f, 3.0f, 10.0f, 100.0f, -3.0f}) {
    const bool bf16 = spread < 0.0f;  // -3: spread 3, rounded to BF16
    std::normal_distribution<float> dist(0.0f, bf16 ? -spread : spread);
    std::vector<float> row(static_cast<size_t>(kVocab));  // [vocab]
    for (float& v : row) v = bf16 ? plumb::bf16_to_f32(plumb::f32_to_bf16(dist(rng))) : dist(rng);
    const plumb::Tensor host_row = plumb::Tensor::from_f32(row, {1, kVocab});  // [1, vocab]
    const plumb::Tensor device_row = gpu.upload(host_row);                     // [1, vocab]
    plumb::Tensor ids = gpu.empty(plumb::DType::kI32, {1});
    const double gpu_s = time_calls(gpu, repeat, [&] { gpu.sample_tokens(device_row, {nucleus}, ids); });
    plumb::Tensor cpu_ids = plumb::Tensor::zeros(plumb::DType::kI32, {1});
    cpu.sample_tokens(host_row, {nucleus}, cpu_ids);
    const bool same = gpu.download(ids).data_as<int32_t>()[0] == cpu_ids.data_as<int32_t>()[0];
    const std::string name = bf16 ? "normal, spread 3, rounded to BF16" : fmt::format("normal, spread {}", spread);
    std::printf("%-38s %12.1f %10s\n", name.c_str(), gpu_s * 1e6, same ? "1/1" : "0/1");
    out["by_distribution"].push_back({{"logits", name}, {"gpu_median_s", gpu_s}, {"same_ids", same ? 1 : 0}});
  }
  if (!json_path.empty()) {
    std::ofstream file(json_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "plumb_gpu_sampler_bench: could not write %s\n", json_path.c_str());
      return 1;
    }
  }
  if (greedy_differs) {
    std::fprintf(stderr, "plumb_gpu_sampler_bench: a greedy GPU id differs from the CPU reference's argmax\n");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int repeat = 11;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeat") {
      char* end = nullptr;
      const long value = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || *end != '\0' || value < 1 || value > 1000) {
        std::fprintf(stderr, "plumb_gpu_sampler_bench: --repeat needs a count from 1 to 1000, got '%s'\n",
                     i + 1 < argc ? argv[i + 1] : "");
        return 2;
      }
      repeat = static_cast<int>(value);
      ++i;
    } else if (arg.rfind("--", 0) == 0 || !json_path.empty()) {
      std::fprintf(stderr,
                   "plumb_gpu_sampler_bench: unexpected argument '%s'\nusage: plumb_gpu_sampler_bench [out.json] "
                   "[--repeat N]\n",
                   arg.c_str());
      return 2;
    } else {
      json_path = arg;
    }
  }
  try {
    return run(json_path, repeat);
  } catch (const plumb::Error& e) {
    std::fprintf(stderr, "plumb_gpu_sampler_bench: %s\n", e.what());
    return 1;
  }
}
