// A bound on how deeply JSON text nests arrays and objects, checked on the text before it is parsed. nlohmann's
// parser itself does not recurse, but copying, dumping and converting a parsed value do, once per level: 20,000
// nested '[' in a 40 KB request overflowed the stack. Everything a stranger or a model folder can send is checked
// against kMaxJsonDepth before it is parsed.
#pragma once

#include <optional>
#include <string_view>

namespace plumb {

// Deepest nesting of arrays and objects plumb accepts in any JSON it reads (requests, conversations, config.json,
// tokenizer.json, tokenizer_config.json, safetensors headers and indexes). Real files nest fewer than 10 levels.
inline constexpr int kMaxJsonDepth = 256;

struct JsonTooDeep {
  int line;  // 1-based line of the bracket that opens level limit + 1
};

// Where `text` nests deeper than `limit` levels ('[' and '{' inside strings do not count), or nullopt when it does
// not. Linear in the text, and correct for any valid JSON; on invalid JSON the parser's own error follows.
std::optional<JsonTooDeep> json_too_deep(std::string_view text, int limit = kMaxJsonDepth);

// Throws plumb::Error "<what> line N: JSON nests deeper than 256 levels (the limit)" when `text` is too deep.
void check_json_depth(std::string_view text, std::string_view what, int limit = kMaxJsonDepth);

}  // namespace plumb
