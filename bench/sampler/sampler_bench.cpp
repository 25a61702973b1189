// Benchmark of the host token draw (engine/sampler.h) on a vocabulary of Qwen3-Next's size: random logits (normal,
// spread 3), the median of repeated draws at successive steps, per sampling setting. Prints a table; with a path,
// also writes JSON.
//
// Usage: plumb_sampler_bench [out.json] [--repeat N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"

int main(int argc, char** argv) {
  std::string json_path;
  int repeat = 21;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeat") {
      char* end = nullptr;
      const long value = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || *end != '\0' || value < 1 || value > 100000) {
        std::fprintf(stderr, "plumb_sampler_bench: --repeat needs a count from 1 to 100000, got '%s'\n",
                     i + 1 < argc ? argv[i + 1] : "");
        return 2;
      }
      repeat = static_cast<int>(value);
      ++i;
    } else if (arg.rfind("--", 0) == 0 || !json_path.empty()) {
      std::fprintf(
          stderr, "plumb_sampler_bench: unexpected argument '%s'\nusage: plumb_sampler_bench [out.json] [--repeat N]\n",
          arg.c_str());
      return 2;
    } else {
      json_path = arg;
    }
  }
  constexpr int64_t kVocab = 248320;
  std::vector<float> logits(kVocab);  // [vocab]
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& l : logits) l = normal(rng);
  const std::vector<int32_t> history = {11, 22, 33, 44};

  struct Setting {
    const char* name;
    plumb::SamplingParams params;
  };
  const Setting settings[] = {
      {"greedy", {}},
      {"temperature 0.7", {.temperature = 0.7f, .seed = 3}},
      {"temperature 0.7, top-p 0.9", {.temperature = 0.7f, .top_p = 0.9f, .seed = 3}},
      {"temperature 0.7, top-k 50", {.temperature = 0.7f, .top_k = 50, .seed = 3}},
      {"temperature 0.7, top-p 0.9, repetition 1.1", {.temperature = 0.7f, .top_p = 0.9f, .repetition_penalty = 1.1f}},
  };
  nlohmann::json out = nlohmann::json::array();
  std::printf("vocabulary %lld, %d draws each\n%-44s %10s\n", static_cast<long long>(kVocab), repeat, "setting",
              "median ms");
  for (const Setting& s : settings) {
    const plumb::Sampler sampler(s.params);
    std::vector<double> ms;
    for (int r = 0; r < repeat; ++r) {
      const auto begin = std::chrono::steady_clock::now();
      const int32_t id = sampler.sample(logits.data(), kVocab, history, static_cast<uint64_t>(r));
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
      if (id < 0 || id >= kVocab) {
        std::fprintf(stderr, "plumb_sampler_bench: drew token %d, outside the vocabulary\n", id);
        return 1;
      }
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    std::printf("%-44s %10.2f\n", s.name, median);
    out.push_back({{"setting", s.name}, {"vocab", kVocab}, {"draws", repeat}, {"median_ms", median}});
  }
  if (!json_path.empty()) {
    std::ofstream file(json_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "plumb_sampler_bench: could not write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
