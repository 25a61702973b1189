// Parsing command-line values into checked types, with errors that name the flag and the value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace plumb::cli {

// "5,17,2" → {5, 17, 2}; "@FILE" reads the same list from FILE (trailing whitespace ignored). Every id must be an
// integer in [0, vocab_size).
std::vector<int32_t> parse_token_ids(const std::string& text, const char* flag, int64_t vocab_size);

// "1,4,16" → {1, 4, 16}: a list of positive integers, for `flag`.
std::vector<int64_t> parse_sizes(const std::string& text, const char* flag);

// Throws unless every id a model folder's tokenizer gave is inside the model's vocabulary.
void check_tokenizer_ids(const std::vector<int32_t>& ids, const std::string& model_dir, int64_t vocab_size);

// A CLI11 check for --seed: "" for a decimal integer in [0, 2^64 - 1], else the message. Without it CLI11 turns -1,
// 2^64 and 2^65 alike into 2^64 - 1.
std::string seed_error(const std::string& text);

}  // namespace plumb::cli
