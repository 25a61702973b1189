#include "core/error.h"

namespace plumb::detail {

void throw_error(std::string message) {
  throw Error(std::move(message));
}

void throw_internal_error(std::string message) {
  throw Error("internal error: " + message, Error::Kind::kInternal);
}

}  // namespace plumb::detail
