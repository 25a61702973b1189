// Regular expressions to Grammar rules: JSON Schema's `pattern` (ECMA-262 syntax, matched anywhere in the string
// unless anchored) and a whole-answer regex. A subset, each construct outside it refused by name (docs/server.md
// lists both): literals and escapes (\t \n \r \f \v \0 \xHH \uHHHH \u{H...}, escaped syntax characters), '.', classes
// [...] and [^...] with ranges, \d \w \s and their negations, groups ( ), (?: ), (?<name> ), alternation |,
// quantifiers * + ? {n} {n,} {n,m} (lazy ones alike: the same texts), '^' and '$' at the ends of a top-level
// alternative only. Characters are Unicode code points (surrogates excepted), as with the regex 'u' flag.
#pragma once

#include <cstdint>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/text_rules.h"

namespace plumb::grammar {

// A rule of `builder` matching the texts whose characters `pattern` matches: all of them (`search` false) or, as
// JSON Schema reads `pattern`, with any characters before and after unless the alternative is anchored there.
// Throws plumb::Error naming the construct and its offset for anything outside the subset, `where` prefixed.
int32_t regex_rule(GrammarBuilder& builder, std::string_view pattern, RegexText text, bool search,
                   std::string_view where);

}  // namespace plumb::grammar
