// Loading the tokenizer fixtures: JSON files under tests/fixtures/tokenizer and the real Qwen3 tokenizer that
// scripts/setup.d/tokenizer.sh unpacks into .cache/qwen3-tokenizer.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/fixtures.h"

namespace plumb::test {

inline std::string tokenizer_fixtures() {
  return fixtures_dir() + "/tokenizer";
}

// The folder with the real Qwen3 tokenizer.json and tokenizer_config.json ("" if setup has not fetched it).
inline std::string qwen3_tokenizer_dir() {
  const std::string dir = source_dir() + "/.cache/qwen3-tokenizer";
  return std::ifstream(dir + "/tokenizer.json").good() ? dir : std::string();
}

// Parses a JSON file, keeping object keys in file order (chat templates iterate dicts in that order).
inline nlohmann::ordered_json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) throw std::runtime_error("cannot open fixture " + path);
  return nlohmann::ordered_json::parse(in);
}

}  // namespace plumb::test
