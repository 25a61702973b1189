// JSON Schema to Grammar: the JSON texts that satisfy a schema, as a grammar a Matcher can walk. A subset of JSON
// Schema 2020-12 (docs/server.md lists it); anything outside it is refused, never ignored, so a constrained answer
// always validates. The text is JSON with bounded whitespace, so a generation cannot loop on blanks.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar.h"

namespace plumb::grammar {

// At most this many blanks (space, tab, newline) after { [ , : and before } ]; none around the whole value.
constexpr int kMaxWhitespace = 20;
// Integer and fraction parts of a number have at most this many digits, an exponent at most two.
constexpr int kMaxDigits = 15;
// minLength, maxLength, minItems and maxItems above this are refused (each counted step is a rule of its own).
constexpr int64_t kMaxCountBound = 4096;

// Literal text around the value: a tool call's opening and closing syntax.
struct JsonWrapping {
  std::string prefix;
  std::string suffix;
};

// Compiles `schema` (its key order is the order properties are written in). Throws plumb::Error naming the keyword
// and its JSON pointer ("unsupported JSON Schema keyword 'format' at #/properties/id") for anything unsupported or
// malformed.
Grammar compile_json_schema(const nlohmann::ordered_json& schema, const JsonWrapping& wrapping = {});

}  // namespace plumb::grammar
