// Encodes every document of a corpus (a JSON list of strings, written by
// tools/make_tokenizer_fixtures.py --bench-corpus) with one thread and prints MB/s as one JSON line, best of N passes
// after a warm-up pass. The Hugging Face figure in docs/performance.md comes from the same corpus on the same machine.
//
//   plumb_tokenizer_bench --tokenizer .cache/qwen3-tokenizer --corpus /tmp/bench_corpus.json [--repeat 3]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

int run(int argc, char** argv) {
  std::string tokenizer_dir, corpus_path;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer")) tokenizer_dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--corpus")) corpus_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--repeat")) repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  PLUMB_CHECK(!tokenizer_dir.empty() && !corpus_path.empty(),
              "usage: plumb_tokenizer_bench --tokenizer DIR --corpus FILE.json [--repeat N]");
  std::ifstream in(corpus_path);
  PLUMB_CHECK(in.good(), "cannot open corpus '{}'", corpus_path);
  const std::vector<std::string> docs = nlohmann::json::parse(in).get<std::vector<std::string>>();
  size_t bytes = 0;
  for (const std::string& d : docs) bytes += d.size();

  using Clock = std::chrono::steady_clock;
  const auto load_start = Clock::now();
  const auto tok = plumb::tokenizer::Tokenizer::from_dir(tokenizer_dir);
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();

  double best = 1e30;
  size_t tokens = 0;
  for (int pass = 0; pass <= repeat; ++pass) {  // pass 0 warms the word cache, as Hugging Face's first pass does
    tokens = 0;
    const auto start = Clock::now();
    for (const std::string& d : docs) tokens += tok.encode(d).size();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (pass > 0) best = std::min(best, s);
  }
  std::printf(
      "{\"bytes\": %zu, \"docs\": %zu, \"tokens\": %zu, \"best_s\": %.4f, \"mb_per_s\": %.3f, "
      "\"load_s\": %.3f}\n",
      bytes, docs.size(), tokens, best, static_cast<double>(bytes) / best / 1e6, load_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plumb_tokenizer_bench: %s\n", e.what());
    return 1;
  }
}
