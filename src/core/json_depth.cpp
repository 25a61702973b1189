#include "core/json_depth.h"

#include "core/error.h"

namespace plumb {

std::optional<JsonTooDeep> json_too_deep(std::string_view text, int limit) {
  int depth = 0, line = 1;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (c == '\n') ++line;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return JsonTooDeep{line};
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

void check_json_depth(std::string_view text, std::string_view what, int limit) {
  if (const std::optional<JsonTooDeep> deep = json_too_deep(text, limit))
    PLUMB_FAIL("{} line {}: JSON nests deeper than {} levels (the limit)", what, deep->line, limit);
}

}  // namespace plumb
