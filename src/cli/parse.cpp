#include "cli/parse.h"

#include <cctype>
#include <charconv>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace plumb::cli {

std::vector<int32_t> parse_token_ids(const std::string& arg, const char* flag, int64_t vocab_size) {
  // Linux caps one argument at 128 KiB, about 25K ids: longer prompts come from a file.
  std::string text = arg;
  if (arg.starts_with('@')) {
    std::ifstream in(arg.substr(1));
    PLUMB_CHECK(in.good(), "{} {}: cannot open the file", flag, arg);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  }
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    PLUMB_CHECK(!item.empty() && ec == std::errc() && ptr == item.data() + item.size(),
                "{}: '{}' is not a token id (expected comma-separated integers)", flag, item);
    PLUMB_CHECK(value >= 0 && value < vocab_size, "{}: token id {} is out of range for vocabulary size {}", flag, value,
                vocab_size);
    ids.push_back(static_cast<int32_t>(value));
    begin = end + 1;
  }
  return ids;
}

void check_tokenizer_ids(const std::vector<int32_t>& ids, const std::string& model_dir, int64_t vocab_size) {
  for (int32_t id : ids)
    PLUMB_CHECK(id < vocab_size, "{}/tokenizer.json gives token id {}, outside the model's vocabulary of {}", model_dir,
                id, vocab_size);
}

std::string seed_error(const std::string& text) {
  uint64_t seed = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (!text.empty() && ec == std::errc() && ptr == text.data() + text.size()) return "";
  return "'" + text + "' is not a seed: expected an integer from 0 to 18446744073709551615 (2^64 - 1)";
}

std::vector<int64_t> parse_sizes(const std::string& text, const char* flag) {
  std::vector<int64_t> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PLUMB_CHECK(!item.empty() && used == item.size() && v > 0, "{}: '{}' is not a positive integer", flag, item);
    out.push_back(v);
    begin = end + 1;
  }
  return out;
}

}  // namespace plumb::cli
