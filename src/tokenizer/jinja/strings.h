// Python str operations that chat templates call (strip, split, case changes, ...), on UTF-8 strings with Python's
// code-point semantics. Case mapping uses utf8proc's simple (one-to-one) mappings, so a few characters whose Python
// mapping expands (e.g. 'ß'.upper() == 'SS') map differently; chat templates apply these only to ASCII keywords.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plumb::tokenizer::jinja {

int64_t codepoint_count(std::string_view s);
// str.strip/lstrip/rstrip: `chars` null strips Unicode whitespace, else any of the code points in *chars.
std::string python_strip(const std::string& s, const std::string* chars, bool left, bool right);
// str.split/rsplit: `sep` null splits on runs of whitespace and drops empty parts; maxsplit < 0 means no limit.
std::vector<std::string> python_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> python_splitlines(const std::string& s);
// "upper", "lower", "title", "capitalize", "swapcase".
std::string python_case(const std::string& s, std::string_view how);
std::string python_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count);
int64_t python_count(const std::string& s, const std::string& sub);
// isdigit, isalpha, isalnum, isspace, isupper, islower, isnumeric, isdecimal, istitle.
bool python_predicate_known(std::string_view name);
bool python_predicate(const std::string& s, std::string_view name);
// The value of a run of decimal digits; `what` names it in the error when it does not fit 64 bits (a template's
// literal or index is its author's input, so it fails as bad input, not as a crash).
int64_t decimal_int64(const std::string& digits, std::string_view what);

}  // namespace plumb::tokenizer::jinja
