// What templates can do with values: operators, attribute and item access, Python str/dict/list methods, Jinja's
// filters and tests, and the globals transformers provides (range, namespace, dict, raise_exception, strftime_now).
// Each follows the Python/Jinja behaviour that transformers' rendering has; errors are plumb::Error with a Python-like
// message (the interpreter adds the template line).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace plumb::tokenizer::jinja {

Value binary_op(std::string_view op, const Value& a, const Value& b);  // + - * / // % ** ~
bool contains(const Value& container, const Value& item);              // Python "item in container"
Value get_attr(const Value& object, const std::string& name);          // object.name (methods come bound)
Value get_item(const Value& object, const Value& key);                 // object[key]
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);
std::vector<Value> iterate(const Value& v);  // for-loop items: list items, dict keys, string characters

Value call_filter(std::string_view name, const Value& target, CallArgs& args);
bool call_test(std::string_view name, const Value& value, CallArgs& args);

// The globals every template sees, before the caller's variables.
Dict default_globals();

}  // namespace plumb::tokenizer::jinja
