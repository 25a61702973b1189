#include "list_flags.h"

#include <algorithm>
#include <cstdint>
#include <regex>

#include "cli/parse.h"
#include "core/error.h"

namespace plumb::bench {

bool parse_list_flag(const std::string& text, const char* flag, bool pairs, std::vector<std::vector<int>>* items,
                     std::string* error) {
  try {
    const std::string number = "[0-9]+", item = pairs ? number + "x" + number : number;
    PLUMB_CHECK(std::regex_match(text, std::regex(item + "(," + item + ")*")), "{}: '{}' is not a list of {}", flag,
                text, pairs ? "NxK" : "T");
    std::string flat = text;
    std::replace(flat.begin(), flat.end(), 'x', ',');
    const std::vector<int64_t> values = cli::parse_sizes(flat, flag);  // positive integers, or it names the value
    const size_t width = pairs ? 2 : 1;
    items->clear();
    for (size_t i = 0; i < values.size(); i += width) {
      std::vector<int> entry;
      for (size_t j = i; j < i + width; ++j) {
        PLUMB_CHECK(values[j] <= (int64_t{1} << 30), "{}: {} is too large", flag, values[j]);
        entry.push_back(static_cast<int>(values[j]));
      }
      items->push_back(entry);
    }
    return true;
  } catch (const Error& e) {
    *error = e.what();
    return false;
  }
}

}  // namespace plumb::bench
