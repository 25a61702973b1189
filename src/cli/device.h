// The Backend a --device flag names. Every subcommand that runs a model gets its backend here, so a new device (the
// CUDA backend) plugs in at one place.
#pragma once

#include <memory>
#include <string>

#include "ops/backend.h"

namespace plumb::cli {

std::unique_ptr<Backend> make_backend(const std::string& device);

}  // namespace plumb::cli
