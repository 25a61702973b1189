// plumb's one error type and its check macros. Every failure a user can cause (a bad file, a bad flag, a bad request)
// ends up as a plumb::Error whose message names the file, field or value at fault; the CLI prints it on one line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace plumb {

class Error : public std::runtime_error {
 public:
  // Who is at fault. kInput: what the caller gave (a file, flag, request); the message says what to fix. kInternal: a
  // broken invariant of plumb's own code, a bug whatever the input was. One type, so every caller that reports errors
  // handles both alike; the kind lets a fuzz harness or a test tell a rejected input from a bug.
  enum class Kind { kInput, kInternal };

  explicit Error(const std::string& message, Kind kind = Kind::kInput) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

namespace detail {
[[noreturn]] void throw_error(std::string message);
[[noreturn]] void throw_internal_error(std::string message);
}  // namespace detail

}  // namespace plumb

// PLUMB_CHECK(cond, "format {}", args...): throws plumb::Error with the formatted message when cond is false.
#define PLUMB_CHECK(cond, ...)                                           \
  do {                                                                   \
    if (!(cond)) ::plumb::detail::throw_error(fmt::format(__VA_ARGS__)); \
  } while (0)

// PLUMB_INTERNAL_CHECK(cond, "format {}", args...): an invariant of plumb's own code, not a check of input; throws
// plumb::Error of kind kInternal, its message starting "internal error: ", when cond is false.
#define PLUMB_INTERNAL_CHECK(cond, ...)                                           \
  do {                                                                            \
    if (!(cond)) ::plumb::detail::throw_internal_error(fmt::format(__VA_ARGS__)); \
  } while (0)

// PLUMB_FAIL("format {}", args...): throws unconditionally.
#define PLUMB_FAIL(...) ::plumb::detail::throw_error(fmt::format(__VA_ARGS__))
