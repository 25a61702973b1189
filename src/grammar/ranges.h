// Integer ranges as grammars: the decimal texts (no leading zeros, '-' before negatives, no "-0") of exactly the
// integers in [lo, hi], for JSON Schema's minimum and maximum.
#pragma once

#include <cstdint>

#include "grammar/grammar.h"

namespace plumb::grammar {

// A rule of `builder` matching the integers lo..hi (lo <= hi).
int32_t integer_range_rule(GrammarBuilder& builder, int64_t lo, int64_t hi);

}  // namespace plumb::grammar
