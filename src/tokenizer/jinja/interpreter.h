// Renders a parsed chat template. Scoping follows Jinja: a for-loop iteration and a macro call get their own scope
// (so "set" inside them is not seen outside; namespace() objects carry state out), if-blocks do not.
#pragma once

#include <string>

#include "tokenizer/jinja/ast.h"

namespace plumb::tokenizer::jinja {

// Renders `body` with `variables` (the template's arguments) on top of default_globals(). Throws plumb::Error
// "chat template line N: ..." on any runtime error, including raise_exception() and exceeding the work budget that
// keeps hostile templates from running forever.
std::string render(const Body& body, const Dict& variables);

}  // namespace plumb::tokenizer::jinja
