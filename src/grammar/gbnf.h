// GBNF, llama.cpp's grammar form, to Grammar: `name ::= alternatives` rules (the one named `root` is matched),
// "literals" and [classes] with \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH escapes, '.' (any character), ( )
// groups, | alternation, * + ? {m} {m,} {m,n} {,n} repetition, # comments; a rule ends at a line's end except inside
// parentheses or after '|'. Characters are Unicode code points written as UTF-8. Left recursion (`e ::= e "+" t`) is
// refused, as the matcher cannot follow it.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace plumb::grammar {

// Throws plumb::Error naming the line and what is wrong (an undefined or twice-defined rule, a syntax error).
Grammar compile_gbnf(std::string_view text);

}  // namespace plumb::grammar
