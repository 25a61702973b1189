// Parses chat-template tokens into a syntax tree (jinja2/parser.py's grammar, for the statements and expressions
// listed in ast.h). Anything outside that subset — include, extends, import, block, custom tags — is rejected with
// "chat template line N: ...", so an unsupported template fails to load instead of rendering a wrong prompt.
#pragma once

#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace plumb::tokenizer::jinja {

// Deepest nesting the parser accepts, of blocks ({% if %}, {% for %}, ...) and of expression trees (brackets,
// unary operators, chains such as 1+1+...): parsing, evaluating and destroying a template recurse once per level,
// so deeper input is refused ("chat template line N: ... nest deeper than 256 levels") instead of overflowing the
// stack. Real chat templates nest fewer than 20 levels.
inline constexpr int kMaxTemplateNesting = 256;

// Filters and tests the interpreter implements; the parser rejects others at load time.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Body parse_template(std::string_view source);

}  // namespace plumb::tokenizer::jinja
