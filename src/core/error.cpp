#include "core/error.h"

namespace plumb::detail {

void throw_error(std::string message) {
  throw Error(std::move(message));
}

}  // namespace plumb::detail
