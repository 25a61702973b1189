// linear_bench's --shapes and --rows lists, in host code (cli::parse_sizes and its errors, which nvcc cannot compile).
#pragma once

#include <string>
#include <vector>

namespace plumb::bench {

// "NxK,..." (pairs) or "T,..." into `items`, every value a positive integer up to 2^30; false with `error` naming the
// flag and the value on anything else.
bool parse_list_flag(const std::string& text, const char* flag, bool pairs, std::vector<std::vector<int>>* items,
                     std::string* error);

}  // namespace plumb::bench
