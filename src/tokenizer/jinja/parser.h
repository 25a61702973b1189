// Parses chat-template tokens into a syntax tree (jinja2/parser.py's grammar, for the statements and expressions
// listed in ast.h). Anything outside that subset — include, extends, import, block, custom tags — is rejected with
// "chat template line N: ...", so an unsupported template fails to load instead of rendering a wrong prompt.
#pragma once

#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace plumb::tokenizer::jinja {

// Filters and tests the interpreter implements; the parser rejects others at load time.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Body parse_template(std::string_view source);

}  // namespace plumb::tokenizer::jinja
