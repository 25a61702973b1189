// plumb's one error type and its check macros. Every failure a user can cause (a bad file, a bad flag, a bad request)
// ends up as a plumb::Error whose message names the file, field or value at fault; the CLI prints it on one line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace plumb {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
[[noreturn]] void throw_error(std::string message);
}  // namespace detail

}  // namespace plumb

// PLUMB_CHECK(cond, "format {}", args...): throws plumb::Error with the formatted message when cond is false.
#define PLUMB_CHECK(cond, ...)                                           \
  do {                                                                   \
    if (!(cond)) ::plumb::detail::throw_error(fmt::format(__VA_ARGS__)); \
  } while (0)

// PLUMB_FAIL("format {}", args...): throws unconditionally.
#define PLUMB_FAIL(...) ::plumb::detail::throw_error(fmt::format(__VA_ARGS__))
